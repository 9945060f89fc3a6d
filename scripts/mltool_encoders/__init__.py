"""The pathology encoders scripts/encoders.py exports to TorchScript with their model card's
preprocessing inside (mltool.json, schemas/encoder.schema.json)."""
