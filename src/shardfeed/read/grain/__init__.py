"""`grain_dataset`: the TensorFlow-free feed for Keras on JAX or PyTorch, Grain over
`IndexedRecords` (pipeline.py: the dataset, its workers and their clean exit; batches.py: global
batch number -> the records' windows, pixels and targets)."""
