"""Which tensors to expose next: the capture strategies (`fusion`, `full`, `bisection`), each run through the
engine. Decides taps from the results so far; never scores or reports.
"""
