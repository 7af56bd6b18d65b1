"""Image catalogs from real photos, and what can be learned about them:

- ``ingest``: photos + a label manifest -> a catalog (upright, metadata stripped, duplicates refused), with its
  report (``ingest_report``), near-duplicate index (``phash_index``) and append-only journal (``ingest_log``);
- ``labels``: the label manifest a person writes (CSV / JSON lines); ``vocabulary``: canonical names and synonyms;
- ``merge``: join catalogs (render shards, photo batches); ``info``: what a catalog holds;
- ``areas``: object areas from render masks or Segment Anything (``sam_masks``), behind ``commonlink stats``.
"""

from commonlink.lazy import lazy_package  # noqa: E402 - after the docstring and the eager names above

#: The public API (docs/api.md) by module, each name imported from its module on first use.
__getattr__, __dir__, __all__ = lazy_package(
    __name__,
    {
        "commonlink.catalog.ingest": ["ingest_photos", "IngestReport"],
        "commonlink.catalog.merge": ["merge_catalogs"],
        "commonlink.catalog.info": ["catalog_summary"],
        "commonlink.formats.catalog": ["iter_catalog"],
    },
)
