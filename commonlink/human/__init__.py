"""Human baselines (issue 37): people answer a release split as a model does, and are scored like one.

* :mod:`.items`: the questions of a split, built by the eval's own request functions (chains played by
  ``run_chains`` along the all-correct path), with their correct answers;
* :mod:`.study`: the static study page (``commonlink human study``);
* :mod:`.answers`: the answers file the page exports, checked against the release and scored by the eval task
  through :class:`~commonlink.human.answers.HumanBackend` (``commonlink eval score``);
* :mod:`.agreement`: agreement with the labels and between people, Fleiss' kappa, bootstrap SEs
  (``commonlink human agreement``).

See docs/human.md.
"""
