"""Shards in a bucket (s3://, gs://, az://, ...), read through local verified copies.

cache.py    the bounded, verified local cache of shards (content-addressed, shared by processes)
feed.py     one worker's fetch-ahead feed through the cache, in the order it reads the shards
mirror.py   a tf.data service worker's copies of every shard, pinned for its lifetime
"""
