"""The records pipeline (DESIGN.md "Records imports"): parse → stage → budget → promote.

One module per stage: parse.py reads the file, stage.py writes validated rows and row errors
with COPY in chunks, promote.py checks the error budget and upserts set-based, slots.py keeps a
tenant to its concurrent imports, pipeline.py runs them under the run's lease.
"""
