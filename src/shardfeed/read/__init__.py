"""The read side: shard sets, reading order, decoding and augmentation, the `load` pipeline."""
