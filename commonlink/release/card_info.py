"""The datasheet questions only the publisher can answer, and the card-info file that answers them.

The card's datasheet asks every question of the Common-O paper's datasheet (§10, Gebru et al.'s questions) in
their words (:data:`DATASHEET_QUESTIONS`). A build answers every question it can from the data; the rest (who made
and funded the set, who collected it, when and under what review, consent, sensitive data, restrictions, DOI, who
maintains it, ...) stay marked on the card with :data:`PUBLISHER_TO_FILL` until the publisher answers them in a
small YAML file::

    commonlink release card-info --template --out card-info.yaml    # one key per question, the question as a comment
    commonlink release build PAIRS... --out DIR --card-info card-info.yaml
    commonlink release card DIR --card-info card-info.yaml          # later: rewrite the card only, manifest kept true

Answers are the publisher's words shown as plain text (every Markdown character escaped, paragraphs kept), so an
answer can never add a heading, a link or a row to the card's Versions table.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from commonlink.errors import InputError
from commonlink.formats.card import markdown_text

PUBLISHER_TO_FILL = "Not recorded by the build; the publisher should state it here before release."

#: Who answers a datasheet question: the build from the data (``build``), the publisher alone (``publisher``: shown
#: as :data:`PUBLISHER_TO_FILL` until answered, and refused by ``release push --strict``), or the build with an
#: optional addition by the publisher (``both``).
BUILD, PUBLISHER, BOTH = "build", "publisher", "both"


@dataclass(frozen=True)
class DatasheetQuestion:
    key: str  #: the key of its answer (in the card-info file, for the questions the publisher answers)
    section: str  #: the datasheet section it belongs to
    question: str  #: Gebru et al.'s words, as the Common-O paper's datasheet (§10) asks them
    answered_by: str = PUBLISHER  #: BUILD, PUBLISHER or BOTH


#: Publisher-answered questions keep this name (older code and card-info files use it).
PublisherQuestion = DatasheetQuestion

_M, _C, _P = "Motivation", "Composition", "Collection Process"
_L, _U, _D, _X = "Preprocessing/Cleaning/Labeling", "Uses", "Distribution", "Maintenance"
_COMMENTS = "Any other comments?"

#: Every question of the Common-O paper's datasheet (§10, after Gebru et al., 2021), in its words and order, plus
#: Gebru et al.'s two remaining preprocessing questions (raw data, software) and the human validation of the labels
#: the paper reports (its 84% agreement; ``commonlink human agreement`` computes the figure).
DATASHEET_QUESTIONS: tuple[DatasheetQuestion, ...] = (
    DatasheetQuestion("purpose", _M, "For what purpose was the dataset created?", BUILD),
    DatasheetQuestion("creators", _M, "Who created the dataset?"),
    DatasheetQuestion("funding", _M, "Who funded the dataset creation?"),
    DatasheetQuestion("motivation_comments", _M, _COMMENTS, BOTH),
    DatasheetQuestion(
        "instances",
        _C,
        "What do the instances that comprise the dataset represent (e.g., documents, photos, people, countries)? Are "
        "there multiple types of instances (e.g., movies, users, and ratings; people and interactions between them; "
        "nodes and edges)? Please provide a description.",
        BUILD,
    ),
    DatasheetQuestion(
        "instance_count", _C, "How many instances are there in total (of each type, if appropriate)?", BUILD
    ),
    DatasheetQuestion(
        "sample",
        _C,
        "Does the dataset contain all possible instances or is it a sample (not necessarily random) of instances from "
        "a larger set? If the dataset is a sample, then what is the larger set? Is the sample representative of the "
        "larger set (e.g., geographic coverage)?",
        BUILD,
    ),
    DatasheetQuestion("label", _C, "Is there a label or target associated with each instance?", BUILD),
    DatasheetQuestion("missing_information", _C, "Is any information missing from individual instances?", BUILD),
    DatasheetQuestion(
        "relationships",
        _C,
        "Are relationships between individual instances made explicit (e.g., users’ movie ratings, social network "
        "links)? If so, please describe how these relationships are made explicit.",
        BUILD,
    ),
    DatasheetQuestion(
        "splits", _C, "Are there recommended data splits (e.g., training, development/validation, testing)?", BUILD
    ),
    DatasheetQuestion("noise", _C, "Are there any errors, sources of noise, or redundancies in the dataset?", BUILD),
    DatasheetQuestion(
        "human_validation",
        _C,
        "Were the labels validated by people, and how well did they agree?",
    ),
    DatasheetQuestion(
        "self_contained",
        _C,
        "Is the dataset self-contained, or does it link to or otherwise rely on external resources (e.g., websites, "
        "tweets, other datasets)?",
        BUILD,
    ),
    DatasheetQuestion(
        "confidential_data",
        _C,
        "Does the dataset contain data that might be considered confidential (e.g., data that is protected by legal "
        "privilege or by doctor–patient confidentiality, data that includes the content of individuals’ nonpublic "
        "communications)?",
    ),
    DatasheetQuestion(
        "sensitive_data",
        _C,
        "Does the dataset contain data that might be considered sensitive in any way (e.g., data that reveals race or "
        "ethnic origins, sexual orientations, religious beliefs, political opinions or union memberships, or "
        "locations; financial or health data; biometric or genetic data; forms of government identification, such as "
        "social security numbers; criminal history)?",
    ),
    DatasheetQuestion("composition_comments", _C, _COMMENTS, BOTH),
    DatasheetQuestion("acquisition", _P, "How was the data associated with each instance acquired?", BUILD),
    DatasheetQuestion(
        "mechanisms",
        _P,
        "What mechanisms or procedures were used to collect the data (e.g., hardware apparatuses or sensors, manual "
        "human curation, software, programs, software APIs)?",
        BOTH,
    ),
    DatasheetQuestion(
        "sampling_strategy",
        _P,
        "If the dataset is a sample from a larger set, what was the sampling strategy (e.g., deterministic, "
        "probabilistic with specific sampling probabilities)?",
        BUILD,
    ),
    DatasheetQuestion(
        "collectors",
        _P,
        "Who was involved in the data collection process (e.g., students, crowdworkers, contractors) and how were "
        "they compensated (e.g., how much were crowdworkers paid)?",
    ),
    DatasheetQuestion("timeframe", _P, "Over what timeframe was the data collected?"),
    DatasheetQuestion(
        "ethical_review", _P, "Were any ethical review processes conducted (e.g., by an institutional review board)?"
    ),
    DatasheetQuestion(
        "data_from_individuals",
        _P,
        "Did you collect the data from the individuals in question directly, or obtain it via third parties or other "
        "sources (e.g., websites)?",
    ),
    DatasheetQuestion("notification", _P, "Were the individuals in question notified about the data collection?"),
    DatasheetQuestion(
        "consent", _P, "Did the individuals in question consent to the collection and use of their data?"
    ),
    DatasheetQuestion(
        "consent_revocation",
        _P,
        "If consent was obtained, were the consenting individuals provided with a mechanism to revoke their consent in "
        "the future or for certain uses? If so, please provide a description, as well as a link or other access point "
        "to the mechanism (if appropriate).",
    ),
    DatasheetQuestion(
        "impact_analysis",
        _P,
        "Has an analysis of the potential impact of the dataset and its use on data subjects (e.g., a data protection "
        "impact analysis) been conducted? If so, please provide a description of this analysis, including the "
        "outcomes, as well as a link or other access point to any supporting documentation.",
    ),
    DatasheetQuestion("collection_comments", _P, _COMMENTS, BOTH),
    DatasheetQuestion(
        "preprocessing",
        _L,
        "Was any preprocessing/cleaning/labeling of the data done (e.g., discretization or bucketing, tokenization, "
        "part-of-speech tagging, SIFT feature extraction, removal of instances, processing of missing values)? If so, "
        "please provide a description. If not, you may skip the remaining questions in this section",
        BUILD,
    ),
    DatasheetQuestion(
        "raw_data",
        _L,
        "Was the “raw” data saved in addition to the preprocessed/cleaned/labeled data (e.g., to support "
        "unanticipated future uses)? If so, please provide a link or other access point to the “raw” data.",
        BOTH,
    ),
    DatasheetQuestion(
        "preprocessing_software",
        _L,
        "Is the software that was used to preprocess/clean/label the data available? If so, please provide a link or "
        "other access point.",
        BUILD,
    ),
    DatasheetQuestion("prior_uses", _U, "Has the dataset been used for any tasks already?"),
    DatasheetQuestion(
        "uses_repository",
        _U,
        "Is there a repository that links to any or all papers or systems that use the dataset? If so, please provide "
        "a link or other access point.",
    ),
    DatasheetQuestion("other_tasks", _U, "What (other) tasks could the dataset be used for?", BUILD),
    DatasheetQuestion(
        "future_use_impact",
        _U,
        "Is there anything about the composition of the dataset or the way it was collected and "
        "preprocessed/cleaned/labeled that might impact future uses?",
    ),
    DatasheetQuestion("not_for", _U, "Are there tasks for which the dataset should not be used?", BUILD),
    DatasheetQuestion("uses_comments", _U, _COMMENTS, BOTH),
    DatasheetQuestion(
        "third_party_distribution",
        _D,
        "Will the dataset be distributed to third parties outside of the entity (e.g., company, institution, "
        "organization) on behalf of which the dataset was created? If so, please provide a description.",
    ),
    DatasheetQuestion(
        "distribution_method",
        _D,
        "How will the dataset will be distributed (e.g., tarball on website, API, GitHub)? Does the dataset have a "
        "digital object identifier (DOI)?",
    ),
    DatasheetQuestion("distribution_date", _D, "When will the dataset be distributed?", BOTH),
    DatasheetQuestion(
        "license",
        _D,
        "Will the dataset be distributed under a copyright or other intellectual property (IP) license, and/or under "
        "applicable terms of use (ToU)?",
        BUILD,
    ),
    DatasheetQuestion(
        "image_licences",
        _D,
        "Under which licences are the individual images, and whom must a user of them credit (attribution)?",
        BOTH,
    ),
    DatasheetQuestion(
        "third_party_restrictions",
        _D,
        "Have any third parties imposed IP-based or other restrictions on the data associated with the instances? If "
        "so, please describe these restrictions, and provide a link or other access point to, or otherwise reproduce, "
        "any relevant licensing terms, as well as any fees associated with these restrictions.",
    ),
    DatasheetQuestion(
        "export_controls",
        _D,
        "Do any export controls or other regulatory restrictions apply to the dataset or to individual instances? If "
        "so, please describe these restrictions, and provide a link or other access point to, or otherwise reproduce, "
        "any supporting documentation.",
    ),
    DatasheetQuestion("distribution_comments", _D, _COMMENTS, BOTH),
    DatasheetQuestion("maintainers", _X, "Who will be supporting/hosting/maintaining the dataset?"),
    DatasheetQuestion(
        "contact", _X, "How can the owner/curator/manager of the dataset be contacted (e.g., email address)?"
    ),
    DatasheetQuestion("erratum", _X, "Is there an erratum? If so, please provide a link or other access point."),
    DatasheetQuestion(
        "updates",
        _X,
        "Will the dataset be updated (e.g., to correct labeling errors, add new instances, delete instances)? If so, "
        "please describe how often, by whom, and how updates will be communicated to dataset consumers (e.g., mailing "
        "list, GitHub)?",
    ),
    DatasheetQuestion(
        "retention",
        _X,
        "If the dataset relates to people, are there applicable limits on the retention of the data associated with "
        "the instances (e.g., were the individuals in question told that their data would be retained for a fixed "
        "period of time and then deleted)? If so, please describe these limits and explain how they will be "
        "enforced.",
    ),
    DatasheetQuestion(
        "older_versions",
        _X,
        "Will older versions of the dataset continue to be supported/hosted/maintained? If so, please describe how. "
        "If not, please describe how its obsolescence will be communicated to dataset consumers.",
        BUILD,
    ),
    DatasheetQuestion(
        "contributions",
        _X,
        "If others want to extend/augment/build on/contribute to the dataset, is there a mechanism for them to do so? "
        "If so, please provide a description.",
        BOTH,
    ),
)
QUESTION_BY_KEY = {q.key: q for q in DATASHEET_QUESTIONS}
#: The human validation of the labels: the figure ``commonlink human agreement`` prints as its card sentence.
HUMAN_VALIDATION = QUESTION_BY_KEY["human_validation"]
#: The questions only the publisher can answer (unanswered ones are marked on the card; ``push --strict`` refuses).
PUBLISHER_QUESTIONS: tuple[DatasheetQuestion, ...] = tuple(q for q in DATASHEET_QUESTIONS if q.answered_by == PUBLISHER)
#: The questions a card-info file answers: the publisher's, and the ones where the publisher may add to the build's.
CARD_INFO_QUESTIONS: tuple[DatasheetQuestion, ...] = tuple(q for q in DATASHEET_QUESTIONS if q.answered_by != BUILD)
QUESTIONS_BY_KEY = {q.key: q for q in CARD_INFO_QUESTIONS}
#: Keys of card-info files written before the full datasheet, each the questions its one answer covered then.
OLD_KEYS = {
    "creators_and_funding": ("creators", "funding"),
    "collection_process": ("collectors", "timeframe", "ethical_review"),
    "restrictions": ("third_party_restrictions", "export_controls"),
}
#: Old keys kept whose old question also covered others (its answer also answers those, unless they are answered).
_ALSO_COVERED = {
    "sensitive_data": ("confidential_data",),
    "consent": ("notification",),
    "maintainers": ("contact",),
}
#: Free texts of the card that are not datasheet answers: a description under the title, a citation of the dataset
#: (shown as a code block in the Citation section, before the paper's).
CARD_TEXTS = {
    "description": "optional; a free-text description shown under the card's title (plain text, paragraphs kept).",
    "citation": "optional; how to cite this dataset (e.g. a BibTeX entry), shown in the card's Citation section.",
}
_TEMPLATE_HINTS = {
    "creators": "e.g. The Example Lab at Example University (names of the people who made it).",
    "funding": "e.g. Grant X of the Example Foundation; the lab's own budget.",
    "motivation_comments": "optional",
    "human_validation": "the card sentence `commonlink human agreement` prints (docs/human.md), e.g. Two annotators "
    "answered 200 sampled examples: 84.0% agreement with the labels; or: None was done.",
    "confidential_data": "e.g. No: photos of our own rooms and objects only.",
    "sensitive_data": "e.g. No: every photo was checked by hand for people, faces, screens and documents.",
    "composition_comments": "optional",
    "mechanisms": "optional; e.g. Photographed with a phone camera (12 MP), labelled by hand.",
    "collectors": "e.g. Two lab members, as part of their paid work; no crowdworkers.",
    "timeframe": "e.g. March to May 2026.",
    "ethical_review": "e.g. Approved by the Example University ethics board (ref 123); or: none was needed, no people.",
    "data_from_individuals": "e.g. N/A: no data about individuals; we took all photos ourselves.",
    "notification": "e.g. N/A: no individuals appear in the images.",
    "consent": "e.g. N/A: no people appear in the images; the photographed rooms belong to the photographers.",
    "consent_revocation": "e.g. N/A (no consent was needed).",
    "impact_analysis": "e.g. N/A: no data subjects.",
    "collection_comments": "optional",
    "raw_data": "optional; e.g. The original photos are kept by the lab and available on request.",
    "prior_uses": "e.g. Not yet; or: the paper X (link).",
    "uses_repository": "e.g. No; or: https://example.org/papers-using-it",
    "future_use_impact": "e.g. Household objects in one country only; not representative of other places.",
    "uses_comments": "optional",
    "third_party_distribution": "e.g. Yes: publicly on the Hugging Face Hub.",
    "distribution_method": "e.g. No DOI yet; cite the paper (arXiv:XXXX.XXXXX).",
    "distribution_date": "optional; e.g. Since June 2026.",
    "image_licences": "optional; the build lists the photos' licences and authors from the ingest manifest's "
    "license/author/source_url columns; e.g. All photos taken by the lab's members, who agreed to cc-by-4.0.",
    "third_party_restrictions": "e.g. No; or: the 3D assets' own licences (listed above).",
    "export_controls": "e.g. No.",
    "distribution_comments": "optional",
    "maintainers": "e.g. The Example Lab.",
    "contact": "e.g. datasets@example.org; or the Hub repo's Community tab.",
    "erratum": "e.g. None yet; errata will be listed in the Hub repo's Community tab.",
    "updates": "e.g. Label fixes as new patch versions; announced on the Hub card.",
    "retention": "e.g. N/A: the dataset does not relate to people.",
    "contributions": "optional; e.g. Open a discussion on the Hub repo.",
}


def card_info_template() -> str:
    """The YAML file ``release card-info --template`` writes: each question as a comment above an empty key."""
    out = [
        "# Answers to the datasheet questions a build cannot answer from the data (commonlink release card-info).",
        "# Write each answer as plain text after its key (use `|` for several lines); leave a key empty to keep",
        "# the question marked as unanswered. Then: commonlink release build ... --card-info THIS_FILE",
        "# (or, for a release already built: commonlink release card RELEASE_DIR --card-info THIS_FILE).",
        "",
    ]
    for key, hint in CARD_TEXTS.items():
        out += [f"# Card: {key}", f"#   {hint}", f"{key}:", ""]
    for q in CARD_INFO_QUESTIONS:
        out += [f"# {q.section}: {q.question}", f"#   {_TEMPLATE_HINTS[q.key]}", f"{q.key}:", ""]
    return "\n".join(out)


#: The largest card-info file read (its answers are a few paragraphs each), in bytes.
CARD_INFO_MAX_BYTES = 256 * 1024
#: The longest answer, in characters.
MAX_ANSWER_CHARS = 20_000


def read_card_info(path: str | os.PathLike) -> dict[str, str]:
    """The answers in a card-info file: ``{key: text}`` for every question answered (empty keys left out).
    Files over :data:`CARD_INFO_MAX_BYTES` and YAML nested too deep to read are refused with a clear error."""
    path = Path(path)
    fix = "Start from `commonlink release card-info --template --out FILE` and fill in the answers."
    if not path.is_file():
        raise InputError(f"--card-info {path}: no such file.", fix)
    size = path.stat().st_size
    if size > CARD_INFO_MAX_BYTES:
        raise InputError(
            f"--card-info {path} is {size:,} bytes; a card-info file holds at most {CARD_INFO_MAX_BYTES:,} bytes.", fix
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(f"--card-info {path}: not readable YAML ({exc}).", fix) from None
    except RecursionError:  # the YAML reader recurses once per level of nesting
        raise InputError(
            f"--card-info {path}: its YAML is nested too deeply to read; answers are text, not nested lists or "
            "mappings.",
            fix,
        ) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(f"--card-info {path}: not a mapping of question keys to answers.", fix)
    return check_card_info(data, where=f"--card-info {path}")


def check_card_info(data: Mapping, *, where: str = "card info") -> dict[str, str]:
    """Answers keyed by question, checked: known keys only, each answer text; empty answers dropped. The keys of
    files written before the full datasheet (:data:`OLD_KEYS`) answer the questions their one question covered."""
    unknown = sorted(str(k) for k in data if k not in QUESTIONS_BY_KEY and k not in OLD_KEYS and k not in CARD_TEXTS)
    if unknown:
        raise InputError(
            f"{where}: unknown key(s) {', '.join(unknown)}.",
            f"The keys are: {', '.join([*CARD_TEXTS, *QUESTIONS_BY_KEY])} (see `commonlink release card-info "
            "--template`).",
        )
    if "```" in str(data.get("citation") or "") or "~~~" in str(data.get("citation") or ""):
        raise InputError(
            f"{where}: the citation holds a code fence (``` or ~~~), which would end the card's code block.",
            "Write the citation without fences (it is shown as a code block as it is).",
        )
    answers = {}
    for key, value in data.items():
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InputError(
                f"{where}: the answer to {key!r} is a {type(value).__name__}, not text.",
                f'Write it as text, e.g. {key}: "..." (use `|` for several lines).',
            )
        answers[key] = str(value).strip()
        if len(answers[key]) > MAX_ANSWER_CHARS:
            raise InputError(
                f"{where}: the answer to {key!r} is {len(answers[key]):,} characters long; the most is "
                f"{MAX_ANSWER_CHARS:,}.",
                "Shorten it (link to a longer document from the answer).",
            )
    for old_key, keys in OLD_KEYS.items():
        if old_key in answers:
            text = answers.pop(old_key)
            for key in keys:
                answers.setdefault(key, text)
    for key, covered in _ALSO_COVERED.items():
        for other in covered:
            if key in answers:
                answers.setdefault(other, answers[key])
    order = [*CARD_TEXTS, *(q.key for q in CARD_INFO_QUESTIONS)]
    return {key: answers[key] for key in order if key in answers}


def answer_markdown(text: str) -> str:
    """A publisher's answer as Markdown that shows exactly its words: paragraphs (blank lines) kept, every
    line's markup escaped, lines of one paragraph joined by a space."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return "\n\n".join(
        " ".join(markdown_text(line.strip()) for line in p.splitlines() if line.strip()) for p in paragraphs
    )


def publisher_answer(card_info: Mapping[str, str] | None, key: str, known: str = "") -> str:
    """The card's answer to the question ``key``: what the build knows (``known``), then the publisher's answer;
    with none, :data:`PUBLISHER_TO_FILL` for a question only the publisher answers (a ``both`` question then rests
    on what the build knows, or "None.")."""
    if key not in QUESTIONS_BY_KEY:
        raise KeyError(key)
    answer = (card_info or {}).get(key)
    if answer:
        return " ".join(filter(None, [known.strip(), answer_markdown(answer)]))
    if QUESTIONS_BY_KEY[key].answered_by == BOTH:
        return known.strip() or "None."
    return " ".join(filter(None, [known.strip(), PUBLISHER_TO_FILL]))


def unanswered_questions(card_text: str) -> list[str]:
    """The publisher questions a card still shows as unanswered (by key), in datasheet order. An answer on a card
    is what stands between its bold question and the next bold question or heading."""
    by_text = {f"**{q.question}**": q.key for q in PUBLISHER_QUESTIONS}
    blocks = re.split(r"(?m)^(\*\*.+\*\*|#+ .*)$", card_text)  # [text, question, answer, question, answer, ...]
    found = {
        by_text[q] for q, answer in zip(blocks[1::2], blocks[2::2]) if q in by_text and PUBLISHER_TO_FILL in answer
    }
    return [q.key for q in PUBLISHER_QUESTIONS if q.key in found]


def publisher_section(card_info: Mapping[str, str] | None, *, heading: str = "## About this release") -> str:
    """The questions only the publisher can answer, by datasheet section, for release kinds without a full
    datasheet (the association card)."""
    out = [heading, ""]
    section = None
    for q in PUBLISHER_QUESTIONS:
        if q.section != section:
            section = q.section
            out += [f"### {section}", ""]
        out += [f"**{q.question}**", "", publisher_answer(card_info, q.key), ""]
    return "\n".join(out)


__all__ = [
    "CARD_INFO_MAX_BYTES",
    "HUMAN_VALIDATION",
    "MAX_ANSWER_CHARS",
    "BOTH",
    "BUILD",
    "CARD_INFO_QUESTIONS",
    "DATASHEET_QUESTIONS",
    "DatasheetQuestion",
    "OLD_KEYS",
    "PUBLISHER",
    "PUBLISHER_QUESTIONS",
    "QUESTION_BY_KEY",
    "PUBLISHER_TO_FILL",
    "QUESTIONS_BY_KEY",
    "PublisherQuestion",
    "CARD_TEXTS",
    "answer_markdown",
    "card_citation",
    "card_description",
    "card_info_template",
    "check_card_info",
    "datasheet_sections",
    "publisher_answer",
    "publisher_section",
    "read_card_info",
    "unanswered_questions",
]


def datasheet_sections(
    known: Mapping[str, str], card_info: Mapping[str, str] | None
) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every datasheet question, by section in Gebru et al.'s order, with its answer: the build's (``known``, by
    question key) for the questions it answers, the publisher's (``card_info``) after what the build knows for the
    others."""
    missing = [q.key for q in DATASHEET_QUESTIONS if q.answered_by == BUILD and not known.get(q.key)]
    if missing:
        raise ValueError(f"the build must answer the datasheet questions {missing}")
    sections: dict[str, list[tuple[str, str]]] = {}
    for q in DATASHEET_QUESTIONS:
        answer = known[q.key] if q.answered_by == BUILD else publisher_answer(card_info, q.key, known.get(q.key, ""))
        sections.setdefault(q.section, []).append((q.question, answer))
    return list(sections.items())


def card_description(card_info: Mapping[str, str] | None) -> list[str]:
    """The publisher's description as card lines (escaped like every answer), or none."""
    text = (card_info or {}).get("description")
    return [answer_markdown(text), ""] if text else []


def card_citation(card_info: Mapping[str, str] | None) -> list[str]:
    """The publisher's citation of the dataset as a code block (its text as written), or none."""
    text = (card_info or {}).get("citation")
    return ["This dataset:", "", "```", text.strip(), "```", ""] if text else []
