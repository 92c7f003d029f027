-- Embedding variant per version (docs/decisions/0110-embedding-variants-share-a-space.md).
-- Append-only: once applied anywhere, this file never changes.

-- How the version's vectors were computed from `embedding_model`: `torch` (the model as shipped,
-- fp32; fp16 on a GPU) or `onnx-int8` (its ONNX export, int8 weights per channel). Both put
-- vectors in the same space, so search reads them together; the column says which one made
-- them, for audits and for a re-embed that wants one variant only. Rows written before this
-- migration were all made by torch.
ALTER TABLE document_versions
    ADD COLUMN embedding_variant TEXT NOT NULL DEFAULT 'torch'
        CONSTRAINT document_versions_embedding_variant_known
        CHECK (embedding_variant IN ('torch', 'onnx-int8'));
