"""Python NRI plugins used by the conformance tests (built on nri_api only)."""
