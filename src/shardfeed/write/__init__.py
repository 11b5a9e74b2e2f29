"""The write side: sources -> splits -> shard plan -> encoded records -> shards -> manifest."""
