"""What `load` does to a record after reading it: parse it (parsing.py: the image's features and
its targets'), decode its image (image.py: only the window needed, at the DCT scale that keeps
it, resized and augmented), and map that over the stream (mapped.py: per record, or the batch's
JPEGs by one op), its targets following (read/targets/)."""
