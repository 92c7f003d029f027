"""The records pipeline (DESIGN.md "Records imports"): parse → stage → budget → promote.

One module per stage: parse.py reads the file, validate.py validates its rows (in a pool of
processes for a large file), stage.py writes validated rows and row errors with COPY in chunks,
promote.py checks the error budget and promotes in slices made visible at once (ad_promote.py
for ad metrics), pipeline.py runs them under the run's lease and the tenant's slots.
"""
