"""A throwaway study that lives outside the kit (issue #43): a package, a notebook, a claims file (with a
test kind of its own) and one :class:`kit.studies.Study` record in this module of its own, registered with
``KIT_STUDIES=toy_study.study:STUDY`` and nothing else. (The record is not in the package's ``__init__``: a
process that imports the study's code first, its background job say, would load ``kit.studies`` while the
package is half imported.) tests/pipeline/test_toy_study.py runs it in the smoke series and finds its page in the report.

It trains nothing: its notebook copies the cold start's held-out outcomes and draws one bar, and its
one claim is a fixture that tells whether the claims reached the study's folder, not a finding.
"""

from pathlib import Path

from kit.studies import COLD_START, Study

HERE = Path(__file__).resolve().parent

STUDY = Study(
    key="toy", section="Toy", notebook="19_toy", upstream={"sft_dir": COLD_START}, product="summary.json",
    title="Toy study (a test fixture) on this run",
    what="Notebook 19_toy copies the cold start's held-out outcomes into its folder and draws them as one bar.",
    figures=(("toy_figure", "the toy study's one bar"),),
    notebook_dir=str(HERE), claims_file=str(HERE / "claims.yaml"), claim_kinds="toy_study.kinds:KINDS")
