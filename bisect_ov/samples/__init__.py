"""Many samples: where they come from (`sources`: lists, generators, folders, `Samples`) and where they run
(`executors`: in this process or on any `concurrent.futures` executor, Dask and Ray included), returning
summaries, never tensors.
"""
