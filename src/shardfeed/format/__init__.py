"""The record format: feature keys, Example encoding, TFRecord framing, the manifest, file I/O."""
