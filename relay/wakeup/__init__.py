"""Wake-ups: how a relay learns that rows were committed without a writer paying for it (the
watch of the outbox id sequence on PostgreSQL, one watch per server for many databases, and
the adaptive poll elsewhere)."""
