"""What a person reads after a run: the static HTML report (:mod:`.html`) with its images and charts, and the
markdown tables and leaderboard (:mod:`.tables`)."""
