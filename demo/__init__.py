"""`spark-bot demo`: the whole bot on one machine, no Slack, no Sparks, no Docker, no root.

An emulated Docker Engine API per node (`docker_api`, `engine`) runs each container as a local
process group of the emulator on the node's own loopback address (`machine`); `cluster` starts
them and builds the ClusterConfig the unchanged controller drives through its `local` driver.
"""
