"""Pipelines of models (optimum-intel exports of several IRs): which component diverges first, then which node.

`bisect_pipeline` (`components.api`) drives the pipeline's own loop with bisect_ov's requests in place of
optimum-intel's (`components.calls`), judges each component on the reference's inputs, and bisects the first one
that diverges; `components.folder` says which family an export folder holds.
"""
