"""The daemon: configuration, the trio server and request handlers, the scheduler,
metrics, logging and the `tidelog` command line.

It sits on top of every other package; nothing imports `broker`.
"""
