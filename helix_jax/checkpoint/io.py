"""Orbax save / restore of Helix caches, parameters and decoding state, with elastic CP re-layout.

On-disk layout of a checkpoint directory ``DIR``::

    DIR/arrays/        one Orbax (StandardCheckpointer, OCDBT) pytree; sharded jax arrays are
                       written shard by shard by their devices (chunk = one shard)
    DIR/manifest.json  written last: format version, model config + hash, per-cache layout
                       (cp, page size, pages), per-array shape/dtype/fingerprint, sha256 of every file

The checkpoint is written in a sibling folder and renamed into place; a checkpoint without
``manifest.json`` is incomplete. Restore checks the manifest, the model config
and every file digest *before* reading any array, then checks every array fingerprint after reading
and before building anything; any failure raises :class:`CheckpointError` and returns nothing.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

from ..cache import HelixMLACache, LATENT_DIM, ROPE_DIM
from ..mesh import make_cp_mesh
from . import relayout
from .integrity import config_dict, config_hash, file_digests, fingerprints

__all__ = ["CheckpointError", "Restored", "save", "restore", "read_manifest", "FORMAT", "FORMAT_VERSION"]

FORMAT = "helix_jax.checkpoint"
FORMAT_VERSION = 1
KV_LAYOUT = "paged-round-robin-v1"   # global page b on rank b % cp; local pages dense in global order
_ITEMS = ("cache", "params", "state")


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, corrupted or incompatible with the requested restore."""


class Restored(NamedTuple):
    cache: HelixMLACache | None
    params: Any
    state: Any
    extra: Any
    manifest: dict


def _is_cache(x) -> bool:
    return isinstance(x, HelixMLACache)


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _paths(tree) -> tuple[list[str], list, Any]:
    """Key paths (strings), leaves and treedef of ``tree`` with caches kept whole."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_cache)
    return [jax.tree_util.keystr(p) for p, _ in flat], [v for _, v in flat], treedef


def _array_entry(x) -> tuple[Any, dict]:
    """What Orbax stores for one leaf, and its manifest entry."""
    entry = {}
    if _is_key(x):
        entry["key_impl"] = str(jax.random.key_impl(x))
        x = jax.random.key_data(x)
    elif not isinstance(x, jax.Array):
        x = np.asarray(x)
        if x.dtype == object:
            raise CheckpointError(f"cannot checkpoint a leaf of dtype object: {x!r}")
        entry["host"] = True
    entry.update(shape=list(x.shape), dtype=str(x.dtype))
    return x, entry


def _cache_entry(c: HelixMLACache) -> dict:
    return {"kv_layout": KV_LAYOUT, "cp_size": c.cp_size, "num_pages": c.num_pages,
            "pages_per_seq": c.pages_per_seq, "batch": c.batch, "capacity": c.capacity,
            "dtype": str(c.dtype), "latent_dim": LATENT_DIM, "rope_dim": ROPE_DIM,
            "fields": list(relayout.cache_fields(c)), **relayout.cache_statics(c),
            "max_committed": int(np.max(np.asarray(c.lens), initial=0))}


def save(directory, *, cache: HelixMLACache | None = None, params=None, state=None, extra=None,
         model_config=None, metadata: dict | None = None, overwrite: bool = False) -> dict:
    """Write a checkpoint to ``directory``; returns the manifest.

    Args:
      cache: one :class:`HelixMLACache` (its KV stays on the devices; written per shard).
      params: any pytree of arrays (e.g. model parameters).
      state: any pytree of arrays that may contain :class:`HelixMLACache` leaves and typed PRNG keys
        (a decoding state); restored against a template of the same structure.
      extra: any pytree of arrays (e.g. token history); restored as ``{key path: array}``.
      model_config: dict / dataclass / NamedTuple describing the model; its hash guards restore.
      metadata: JSON-serializable extras stored in the manifest under ``"metadata"``.
      overwrite: replace an existing ``directory``.
    """
    import orbax.checkpoint as ocp

    items = {"cache": cache, "params": params, "state": state, "extra": extra}
    if all(v is None for v in items.values()):
        raise ValueError("save: nothing to save (pass cache=, params= and/or state=)")
    if cache is not None and not _is_cache(cache):
        raise ValueError(f"cache must be a HelixMLACache, got {type(cache).__name__}")
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()) and not overwrite:
        raise ValueError(f"directory {directory} exists and is not empty (pass overwrite=True)")
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "model_config": config_dict(model_config), "model_config_hash": config_hash(model_config),
                "metadata": json.loads(json.dumps(metadata if metadata is not None else {})),
                "trees": {}, "caches": {}, "arrays": {}}
    tree = {}
    for item, value in items.items():
        if value is None:
            continue
        paths, leaves, _ = _paths(value)
        manifest["trees"][item] = paths
        node = tree[item] = {}
        for i, (path, leaf) in enumerate(zip(paths, leaves)):
            key = f"{item}/{i}"
            if _is_cache(leaf):
                manifest["caches"][key] = dict(_cache_entry(leaf), path=path)
                node[str(i)] = {}
                for f, x in relayout.cache_fields(leaf).items():
                    node[str(i)][f], manifest["arrays"][f"{key}/{f}"] = _array_entry(x)
            else:
                node[str(i)], manifest["arrays"][key] = _array_entry(leaf)
    stored = [_lookup(tree, k) for k in manifest["arrays"]]
    for entry, fp in zip(manifest["arrays"].values(), fingerprints(stored)):
        entry["fingerprint"] = fp
    if cache is not None:   # top-level summary of the primary cache
        manifest.update(cp_size=cache.cp_size, page_size=cache.page_size, kv_layout=KV_LAYOUT)
    # Write beside the target and swap at the end: an old checkpoint survives a failed overwrite.
    work = directory.with_name(f".{directory.name}.saving-{os.getpid()}")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ckptr = ocp.StandardCheckpointer()
    try:
        ckptr.save(work / "arrays", tree)
        ckptr.wait_until_finished()
    finally:
        ckptr.close()
    manifest["files"] = {f"arrays/{k}": v for k, v in file_digests(work / "arrays").items()}
    (work / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
        os.replace(directory, old)
        os.replace(work, directory)
        shutil.rmtree(old)
    else:
        os.replace(work, directory)
    return manifest


def read_manifest(directory) -> dict:
    """The manifest of a complete checkpoint (``CheckpointError`` if missing or malformed)."""
    path = Path(directory) / "manifest.json"
    if not path.is_file():
        raise CheckpointError(f"{directory}: no manifest.json - not a helix_jax checkpoint, or an "
                              "interrupted save")
    try:
        m = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: manifest is corrupted ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} manifest")
    if m.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {m.get('format_version')} is not supported "
                              f"(this helix_jax reads version {FORMAT_VERSION})")
    for k in ("trees", "caches", "arrays", "files"):
        if not isinstance(m.get(k), dict):
            raise CheckpointError(f"{path}: manifest lacks '{k}'")
    return m


def _check_model_config(manifest, model_config):
    if model_config is None:
        return
    want, have = config_dict(model_config), manifest.get("model_config")
    if have is None:
        raise CheckpointError("model_config given but the checkpoint was saved without one")
    if config_hash(model_config) != manifest.get("model_config_hash"):
        keys = sorted(set(want) | set(have))
        diff = [f"{k}: checkpoint {have.get(k)!r} vs requested {want.get(k)!r}"
                for k in keys if have.get(k) != want.get(k)]
        raise CheckpointError("incompatible model config: " + ("; ".join(diff) or "hash differs"))


def _check_files(directory: Path, manifest):
    for rel, want in manifest["files"].items():
        path = directory / rel
        if not path.is_file():
            raise CheckpointError(f"{directory}: file {rel} is missing (truncated checkpoint)")
    have = file_digests(directory / "arrays")
    for rel, want in manifest["files"].items():
        got = have.get(rel.removeprefix("arrays/"))
        if got is None or got["size"] != want["size"]:
            raise CheckpointError(f"{directory}: file {rel} has {got and got['size']} bytes, "
                                  f"expected {want['size']} (truncated checkpoint)")
        if got["sha256"] != want["sha256"]:
            raise CheckpointError(f"{directory}: file {rel} fails its sha256 check (corrupted checkpoint)")


def _pool_sharding(shape, mesh: Mesh, axis_name: str):
    # Old pools land sharded over the new mesh when the row count allows, else replicated.
    if shape and shape[0] % mesh.size == 0 and axis_name in mesh.shape and mesh.size == mesh.shape[axis_name]:
        return NamedSharding(mesh, P(axis_name))
    return NamedSharding(mesh, P())


def _abstract(entry, sharding):
    if sharding is None:   # a host (numpy) leaf: Orbax restores numpy for a numpy target
        return np.empty(tuple(entry["shape"]), jnp.dtype(entry["dtype"]))
    return jax.ShapeDtypeStruct(tuple(entry["shape"]), jnp.dtype(entry["dtype"]), sharding=sharding)


def restore(directory, *, mesh: Mesh | None = None, page_size: int | None = None, max_len: int | None = None,
            num_pages: int | None = None, params_like=None, state_like=None, model_config=None) -> Restored:
    """Read a checkpoint, verify it completely, then re-lay its caches onto the requested layout.

    Args:
      mesh: target mesh of the ``cache`` item (any cp; default: a fresh mesh of the saved cp).
      page_size, max_len, num_pages: target layout of the ``cache`` item (default: as saved; the
        global capacity is kept, so a different cp or page size only changes where pages live).
      params_like: pytree with the structure of the saved params; its leaves (arrays or
        ``ShapeDtypeStruct`` with sharding) say where to place them. Without it, params come back
        as ``{key path: array}`` on the first device.
      state_like: template decoding state (required to restore a ``state`` item): same structure;
        each :class:`HelixMLACache` in it gives the target mesh, page size, page tables; other
        leaves give shape, dtype and sharding; typed PRNG keys are rebuilt with the saved impl.
      model_config: if given, must match the checkpoint's (else ``CheckpointError``).
    """
    import orbax.checkpoint as ocp

    directory = Path(directory)
    manifest = read_manifest(directory)
    _check_model_config(manifest, model_config)
    trees = manifest["trees"]
    if "state" in trees and state_like is None:
        raise ValueError("restore: the checkpoint holds a decoding state; pass state_like= (a template state)")
    plans = {item: _plan(item, manifest, like)
             for item, like in (("params", params_like), ("state", state_like), ("extra", None))
             if item in trees}
    if "cache" in trees:
        plans["cache"] = _plan_cache(manifest, mesh=mesh, page_size=page_size, max_len=max_len,
                                     num_pages=num_pages)
    _check_files(directory, manifest)
    # Abstract target tree mirroring the saved one; shardings from the plans.
    target = {item: {} for item in trees}
    for item, plan in plans.items():
        for i, how in plan.items():
            if isinstance(i, int):
                target[item][str(i)] = how["abstract"]
    ckptr = ocp.StandardCheckpointer()
    try:
        loaded = ckptr.restore(directory / "arrays", target)
    except Exception as e:  # noqa: BLE001 - any reader failure means an unusable checkpoint
        raise CheckpointError(f"{directory}: Orbax could not read the arrays ({type(e).__name__}: {e})") from e
    finally:
        ckptr.close()
    _check_fingerprints(manifest, loaded)
    out = {item: _build(item, manifest, plans[item], loaded[item]) for item in plans}
    return Restored(out.get("cache"), out.get("params"), out.get("state"), out.get("extra"), manifest)


def _lookup(tree, key: str):
    for part in key.split("/"):
        tree = tree[part]
    return tree


def _check_fingerprints(manifest, loaded):
    nodes = [_lookup(loaded, k) for k in manifest["arrays"]]
    for (key, entry), node in zip(manifest["arrays"].items(), nodes):
        if list(node.shape) != entry["shape"] or str(node.dtype) != entry["dtype"]:
            raise CheckpointError(f"array {key}: read {node.shape} {node.dtype}, manifest says "
                                  f"{entry['shape']} {entry['dtype']}")
    for (key, entry), fp in zip(manifest["arrays"].items(), fingerprints(nodes)):
        if fp != entry["fingerprint"]:
            raise CheckpointError(f"array {key}: content fingerprint mismatch (corrupted checkpoint)")


# -- planning: what to read and where to place it, validated before any read -----------------------

def _cache_abstract(manifest, key, mesh, axis_name):
    arrays = manifest["arrays"]
    rep = NamedSharding(mesh, P())
    return {f: _abstract(arrays[f"{key}/{f}"],
                         _pool_sharding(arrays[f"{key}/{f}"]["shape"], mesh, axis_name)
                         if f not in ("page_table", "lens") else rep)
            for f in manifest["caches"][key]["fields"]}


def _plan_cache(manifest, *, mesh, page_size, max_len, num_pages):
    (key, info), = [(k, v) for k, v in manifest["caches"].items() if k.startswith("cache/")]
    mesh = make_cp_mesh(info["cp_size"], axis_name=info["axis_name"]) if mesh is None else mesh
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    axis = info["axis_name"] if info["axis_name"] in mesh.shape else mesh.axis_names[0]
    page_size = info["page_size"] if page_size is None else page_size
    max_len = info["capacity"] if max_len is None else max_len
    relayout._check_max_len(max_len, np.asarray([info["max_committed"]]))
    tables, n = relayout.target_layout(info["batch"], mesh=mesh, axis_name=axis, page_size=page_size,
                                       max_len=max_len, num_pages=num_pages)
    return {0: {"abstract": _cache_abstract(manifest, key, mesh, axis), "cache": info, "mesh": mesh,
                "axis": axis, "page_size": page_size, "tables": tables, "num_pages": n, "max_len": max_len}}


def _plan(item, manifest, like):
    """Per-leaf restore plan of a params/state item against its template ``like``."""
    paths = manifest["trees"][item]
    if like is None:   # params without template: {path: array} on the first device
        if any(k.startswith(f"{item}/") for k in manifest["caches"]):
            raise ValueError(f"restore: the checkpoint's {item} holds caches; pass {item}_like=")
        dev = SingleDeviceSharding(jax.devices()[0])
        plan = {}
        for i, p in enumerate(paths):
            entry = manifest["arrays"][f"{item}/{i}"]
            plan[i] = {"abstract": _abstract(entry, None if entry.get("host") else dev), "like": None, "path": p}
        plan["_treedef"] = None
        return plan
    like_paths, like_leaves, treedef = _paths(like)
    if like_paths != paths:
        missing = sorted(set(paths) - set(like_paths))[:5]
        extra = sorted(set(like_paths) - set(paths))[:5]
        raise ValueError(f"{item}_like: structure differs from the checkpoint's {item} "
                         f"(only in checkpoint: {missing}; only in template: {extra})")
    plan = {"_treedef": treedef}
    for i, (path, leaf) in enumerate(zip(paths, like_leaves)):
        key = f"{item}/{i}"
        if _is_cache(leaf):
            if key not in manifest["caches"]:
                raise ValueError(f"{item}_like{path}: template has a HelixMLACache, checkpoint has an array")
            plan[i] = _plan_state_cache(manifest, key, path, leaf)
        else:
            if key not in manifest["arrays"]:
                raise ValueError(f"{item}_like{path}: template has an array, checkpoint has a HelixMLACache")
            plan[i] = _plan_leaf(manifest["arrays"][key], path, leaf, item)
    return plan


def _plan_leaf(entry, path, leaf, item):
    is_key = _is_key(leaf)
    shape = tuple(jax.random.key_data(leaf).shape) if is_key else tuple(np.shape(leaf))
    dtype = jax.random.key_data(leaf).dtype if is_key else getattr(leaf, "dtype", np.asarray(leaf).dtype)
    if is_key != ("key_impl" in entry):
        raise ValueError(f"{item}_like{path}: PRNG key vs plain array mismatch with the checkpoint")
    if list(shape) != entry["shape"] or str(jnp.dtype(dtype)) != entry["dtype"]:
        raise ValueError(f"{item}_like{path}: template is {list(shape)} {jnp.dtype(dtype)}, "
                         f"checkpoint has {entry['shape']} {entry['dtype']}")
    if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)):
        sharding = getattr(leaf, "sharding", None) or SingleDeviceSharding(jax.devices()[0])
    else:
        sharding = None   # host leaf
    return {"abstract": _abstract(entry, sharding), "like": leaf, "path": path}


def _plan_state_cache(manifest, key, path, like: HelixMLACache):
    info = manifest["caches"][key]
    if info["batch"] != like.batch:
        raise ValueError(f"state_like{path}: template cache batch {like.batch} != checkpoint {info['batch']}")
    if info["kv_dtype"] != relayout.cache_statics(like)["kv_dtype"]:
        raise ValueError(f"state_like{path}: template cache kv_dtype {relayout.cache_statics(like)['kv_dtype']!r} "
                         f"!= checkpoint {info['kv_dtype']!r}")
    if info["dtype"] != str(like.dtype):
        raise ValueError(f"state_like{path}: template cache dtype {like.dtype} != checkpoint {info['dtype']}")
    relayout._check_max_len(like.capacity, np.asarray([info["max_committed"]]))
    return {"abstract": _cache_abstract(manifest, key, like.mesh, like.axis_name), "cache": info,
            "mesh": like.mesh, "axis": like.axis_name, "page_size": like.page_size,
            "tables": np.asarray(like.page_table), "num_pages": like.num_pages, "max_len": like.capacity}


# -- building the restored objects (only after every check passed) --------------------------------

def _build_cache(how, arrays):
    lens = np.asarray(arrays["lens"])
    relayout._check_max_len(how["max_len"], lens)
    fields = dict(arrays, page_table=np.asarray(arrays["page_table"]), lens=lens)
    return relayout.relayout_arrays(
        fields, src_page_size=how["cache"]["page_size"], mesh=how["mesh"], axis_name=how["axis"],
        page_size=how["page_size"], dst_tables=how["tables"], num_pages=how["num_pages"],
        kv_dtype=how["cache"]["kv_dtype"])


def _build_leaf(how, entry, value):
    if "key_impl" in entry:
        return jax.random.wrap_key_data(value, impl=entry["key_impl"])
    if isinstance(how["like"], (bool, int, float)):   # Python scalars come back as Python scalars
        return type(how["like"])(np.asarray(value).item())
    return value


def _build(item, manifest, plan, loaded):
    if item == "cache":
        return _build_cache(plan[0], loaded["0"])
    leaves = []
    for i in sorted(k for k in plan if isinstance(k, int)):
        how, key = plan[i], f"{item}/{i}"
        if "cache" in how:
            leaves.append(_build_cache(how, loaded[str(i)]))
        else:
            leaves.append(_build_leaf(how, manifest["arrays"][key], loaded[str(i)]))
    if plan.get("_treedef") is None:
        return {plan[i]["path"]: v for i, v in zip(sorted(k for k in plan if isinstance(k, int)), leaves)}
    return jax.tree_util.tree_unflatten(plan["_treedef"], leaves)

