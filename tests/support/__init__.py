"""The test kit: what more than one test file needs, in one place, by what it is.

- `logs`: a logger that drops everything (`QUIET`) and one that keeps every line
  (`CapturedLog`);
- `pipeline`: a pipeline under test: counting policies, the NRI messages of pods and
  containers, a static-policy pipeline.

A helper that one file needs stays in that file; one that a second file needs moves here
(never copied).
"""
