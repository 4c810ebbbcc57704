"""Many samples: where they come from (`sources`: lists, generators, folders, `Samples`), how they are run
(`runs`: cut into units, two passes, merged), what a unit carries and does on a worker (`units`), and where
units run (`executors`: in this process or on any `concurrent.futures` executor, Dask and Ray included),
returning summaries, never tensors.
"""
