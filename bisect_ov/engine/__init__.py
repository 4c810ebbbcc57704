"""Running both sides of a comparison: compiles, tapped and streamed measurements, pieces run alone, and the
ledger that counts compiles and inferences. Reads the model tier and the devices; knows nothing of strategies,
experiments or the report.
"""
