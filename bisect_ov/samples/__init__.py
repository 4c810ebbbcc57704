"""Many samples: where they come from (`sources`: lists, generators, folders, `Samples`), how they are run
(`runs`: cut into batches, two passes, merged), what a batch carries and does on a worker (`batches`), and where
batches run (`executors`: in this process or on any `concurrent.futures` executor, Dask and Ray included),
returning summaries, never tensors.
"""
