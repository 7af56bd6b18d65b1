"""Release folders (parquet shards + dataset card + manifest) and their versions on the Hub:

- ``build``: ``release build``, choosing the builder from the inputs' sidecar kind;
- ``common_o`` / ``association``: the two builders; ``staging``: what they share (option checks, staging folder
  and atomic swap, manifest file table, reuse of an identical build);
- ``shards``: streaming parquet writer; ``datasheet`` / ``association_card`` / ``figures``: the dataset cards;
- ``hub``: versioned pushes and the versions table.
"""
