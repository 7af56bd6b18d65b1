"""Building datasets: image catalogs, Common-O pairs, association chains, release folders."""
