"""The contracts every stage shares, and nothing else (no stage imports another to learn a file's shape):

- ``catalog``: the image catalog (``catalog.jsonl`` records, reading, atomic writing, the writer lock);
- ``common_o``: the Common-O row (published ``facebook/Common-O`` columns and features, the paper's prompts, letters);
- ``association``: the association files (image table, task files, plan codes, release features, pixel fetching);
- ``meta``: the ``FILE.meta.json`` sidecar of pairs and chain files (kinds, reader, writer, one clock);
- ``release``: the release folder (manifest, card file names, the X.Y.Z version rule, licence ids);
- ``card``: Hub dataset-card metadata (YAML front matter, configs, dataset_info, tables);
- ``licences``: the licence ids of images and assets, and which release licences may carry each (the rules table).
"""
