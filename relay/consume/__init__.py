"""The consumer side: the inbox that makes each message take effect once, the event consumer
that runs handlers in one transaction with the inbox claim, and the dead-letter queues.
"""
