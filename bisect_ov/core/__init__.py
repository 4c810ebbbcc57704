"""The shared leaves every tier reads: frozen records (`records`), their field-driven JSON codec (`codec`), the
error family (`errors`), atomic file writes (`fileio`) and numeric constants (`numeric`). Standard library and
numpy only; nothing here imports another tier of bisect_ov.
"""
