"""See what the resource manager did: a picture of the node and its renderings.

`model` builds the picture (`NodeView`) of one moment from a frozen state and the
topology; `pools` reads what a policy holds besides its containers' cpusets; `text` makes
every name safe to show; `terminal` and `html` render a picture.  All of it is pure: the
daemon, the simulator and the command line feed it and write what it returns.
"""
