"""The `bisect()` run: its options (`options`), the stages that hand frozen records to each other
(`stages`), the report built from them (`assemble`) and the front door (`api`).
"""
