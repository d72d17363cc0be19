"""Orbax checkpoints of Helix caches, parameters and decoding state, with elastic CP re-layout.

``save(dir, cache=..., params=..., state=..., model_config=...)`` writes sharded arrays shard by
shard plus a JSON manifest; ``restore(dir, mesh=..., page_size=...)`` verifies everything, then
re-lays the KV pages by the ledger onto any cp / page size. See ``docs/architecture.md``.
"""
from .integrity import config_hash, fingerprint
from .io import FORMAT, FORMAT_VERSION, CheckpointError, Restored, read_manifest, restore, save
from .relayout import layout_template, relayout_cache
from .spec_state import restore_state, resume_spec_decode, save_spec_run, save_state

__all__ = ["save", "restore", "read_manifest", "relayout_cache", "layout_template", "save_state", "restore_state",
           "save_spec_run", "resume_spec_decode", "CheckpointError", "Restored",
           "fingerprint", "config_hash", "FORMAT", "FORMAT_VERSION"]
