"""The Kafka edge: listeners bound, connections accepted, frames read and answered in order,
the memory of requests read but not handled; dispatch to ``kgroupd.broker.handlers``.
Nothing below this layer imports it."""
