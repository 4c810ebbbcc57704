"""What is measured beyond the taps: partitioned runs (impact, delegation range, contribution curve, the
verified fix), a quantized twin's tolerance and layer sensitivity, and the generation steps of a stateful LLM.
"""
