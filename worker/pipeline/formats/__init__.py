"""One module per document format; each turns a file into Markdown blocks (docs/decisions/0210).

Every reader returns the same shape, `common.Doc`: Markdown text with real heading levels
(`#`, `##` …), list items as `- …`, tables as Markdown tables, and for paged formats (PDF,
images, slides) the offset where each page starts. worker/pipeline/extract.py picks the reader.
"""
