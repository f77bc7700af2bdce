"""The report's sections: each turns one kind of number into a chart and a caption.

A builder returns None when the run has no such data (no langid stage, no tokens, no
mixture), and the page then lists it under "not in this run" instead of drawing an
empty chart. Builders only read what they need (see collect, ledger, lengths, mixture).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.formats.layout import Layout
from pipeline.report import collect, ledger, lengths, scores, svg
from pipeline.report.collect import Bars
from pipeline.report.mixture import read_mixture
from pipeline.util.numbers import counted

MAX_LANGUAGES = 20
CLUSTER_AXES = ("cluster size (documents)", "clusters of that size")
# The scored documents a classifier's chart counts as kept: those in the run's output,
# not every one it kept (a later stage may drop some), so named for what they are.
OUTPUT = "in the output"


@dataclass
class Section:
    id: str
    title: str
    caption: str
    body: str  # HTML (SVG charts, tables), already escaped


@dataclass
class Context:
    """What the builders share: the run's folder, manifest and cost, and a mixture folder."""

    layout: Layout
    manifest: dict
    cost: dict | None
    mix_dir: Path | None
    missing: list[str] = field(default_factory=list)  # sections left out, with why

    @property
    def sources(self) -> list[str]:
        return list(self.manifest["sources"])


def _bars(bars: Bars, title: str, unit: str = "") -> str:
    return svg.hbars(bars.labels, bars.series, title, unit)


def _table(header: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{svg.esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{svg.esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def balance(ctx: Context) -> Section:
    bars = collect.balance(ctx.manifest)
    b = ctx.manifest["balance"]
    rows = [
        [name, f"{s['input']:,}", f"{s['output']:,}", f"{s['rejected']:,}", f"{s['rejected'] / max(s['input'], 1):.1%}"]
        for name, s in ctx.manifest["sources"].items()
    ]
    rows.append(
        [
            "all",
            f"{b['input']:,}",
            f"{b['output']:,}",
            f"{b['rejected']:,}",
            f"{b['rejected'] / max(b['input'], 1):.1%}",
        ]
    )
    return Section(
        "balance",
        "Balance",
        "Every input document is kept or rejected with a reason: kept + rejected = input, per source.",
        _bars(bars, "Documents per source: kept and rejected")
        + _table(["source", "input", "kept", "rejected", "rejected %"], rows),
    )


def drops_per_stage(ctx: Context) -> Section:
    return Section(
        "drops-stage",
        "Drops per stage",
        'Documents each stage removed, per source; "read" is bad input quarantined by the reader.',
        _bars(collect.drops_per_stage(ctx.manifest), "Documents dropped per stage"),
    )


def drops_per_rule(ctx: Context) -> Section | None:
    bars = collect.drops_per_rule(ctx.manifest)
    if not bars.labels:
        ctx.missing.append("drops per rule (nothing was dropped)")
        return None
    return Section(
        "drops-rule",
        "Drops per rule",
        "Documents per rule (stage:reason), per source, most first.",
        _bars(bars, "Documents dropped per rule"),
    )


def length_distributions(ctx: Context) -> Section:
    docs = [p for s in ctx.sources for p in ctx.layout.doc_files(s)]
    rejects = ledger.ledger_files(ctx.layout, ctx.sources)
    fraction = lengths.sample_fraction(lengths.rows_in(docs) + lengths.rows_in(rejects))
    after = lengths.char_lengths(docs, fraction)
    before = after + lengths.char_lengths(rejects, fraction)
    edges, (b, a) = lengths.trim(before.counts, after.counts)
    charts = svg.histogram(
        edges, {"before (kept + rejected)": b, "after (kept)": a}, "Characters per document", "characters (log scale)"
    )
    caption = "Documents per length bin, log-scaled; before counts the rejected documents that have text."
    if before.sampled:
        seen = f"{before.rows_seen:,} of {counted(before.rows_total, 'document')}"
        caption += f" Sampled: {seen} (each file's first {fraction:.2%})."
    folders = collect.token_folders(ctx.layout)
    if folders:
        tokens = lengths.token_lengths([p for shards in folders.values() for p in shards])
        edges, (t,) = lengths.trim(tokens.counts)
        charts += svg.histogram(edges, {"after (kept)": t}, "Tokens per document", "tokens (log scale)")
        if tokens.sampled:
            caption += (
                f" Tokens sampled: {tokens.rows_seen:,} of {counted(tokens.rows_total, 'document')}, evenly spaced."
            )
    return Section("lengths", "Document length", caption, charts)


def languages(ctx: Context) -> Section | None:
    kept = lengths.languages([p for s in ctx.sources for p in ctx.layout.doc_files(s)])
    dropped = collect.dropped_languages(ctx.manifest)
    if not kept and not dropped:
        ctx.missing.append("languages (no lang column: add the langid stage)")
        return None
    totals = kept + dropped
    top = sorted(totals, key=lambda k: (-totals[k], k))[:MAX_LANGUAGES]
    bars = Bars(top, {"kept": [kept[k] for k in top], "dropped": [dropped[k] for k in top]})
    caption = (
        f"Top {len(top)} of {counted(len(totals), 'language')}; kept from the documents' lang column, "
        "dropped from the langid reasons. "
        f"{lengths.NO_LANGUAGE} is a document langid skipped (e.g. code); low-score, one it could not place."
    )
    return Section("languages", "Languages", caption, _bars(bars, "Documents per language"))


def classifier_scores(ctx: Context) -> Section | None:
    found = scores.score_histograms(ctx.layout, ctx.manifest)
    if not found:
        ctx.missing.append("classifier scores (no <name>_score columns: add the classify stage)")
        return None
    charts, rows = [], []
    for (name, source), found_scores in found.items():
        kept, dropped = int(found_scores.kept.sum()), int(found_scores.dropped.sum())
        thresholds = sorted(found_scores.thresholds)
        marks = [(t, f"threshold {t:g}") for t in thresholds]
        charts.append(f"<h3>{svg.esc(scores.column(name))} in {svg.esc(source)}</h3>")
        charts.append(
            svg.histogram(
                scores.EDGES,
                {OUTPUT: found_scores.kept, f"dropped ({scores.REASON_PREFIX}{name})": found_scores.dropped},
                f"{scores.column(name)} in {source}: {kept:,} {OUTPUT}, {dropped:,} dropped",
                "score",
                log_x=False,
                marks=marks,
            )
        )
        rows.append([name, source, f"{kept:,}", f"{dropped:,}", ", ".join(f"{t:g}" for t in thresholds) or "none"])
    caption = (
        f"Documents per score bin of each classifier, per source: {OUTPUT} (the score columns of the run's "
        "documents) against dropped by that classifier (the scores in its ledger detail), the threshold dashed. "
        "A document the classifier kept and a later stage dropped (paragraph_dedup's partial copies) is in "
        "neither, so the two need not add up to what the manifest says the classifier kept; a source a "
        "classifier skipped (null scores) has no chart."
    )
    table = _table(["classifier", "source", OUTPUT, "dropped", "threshold"], rows)
    return Section("classify", "Classifier scores", caption, table + "".join(charts))


def duplicate_clusters(ctx: Context) -> Section | None:
    clusters = ledger.duplicate_clusters(ledger.ledger_files(ctx.layout, ctx.sources))
    if clusters is None:
        ctx.missing.append("duplicate clusters (no duplicates in the ledger: add the dedup stage)")
        return None
    labels, counts = ledger.size_buckets(clusters.sizes)
    caption = (
        f"{counted(sum(clusters.sizes.values()), 'cluster')} of documents sharing one survivor; "
        "a cluster's size counts the survivor "
        f"and the {counted(clusters.rows_read, 'removed duplicate')}."
    )
    if clusters.truncated:
        caption += f" Only the first {clusters.rows_read:,} duplicate rows of the ledger were read."
    return Section(
        "duplicates",
        "Duplicate clusters",
        caption,
        svg.hbars(labels, {"clusters": counts}, "Clusters per size", axes=CLUSTER_AXES),
    )


def pii(ctx: Context) -> Section | None:
    bars = collect.pii_counts(ctx.manifest)
    if bars is None:
        ctx.missing.append("PII (no pii.* counters: add the pii stage)")
        return None
    return Section(
        "pii",
        "PII replacements",
        f"{counted(bars.total(), 'replacement')} by type.",
        _bars(bars, "PII replacements per type"),
    )


def tokens_per_source(ctx: Context) -> Section | None:
    bars = collect.tokens_per_source(ctx.layout)
    if bars is None:
        ctx.missing.append("tokens (no tokens/ folder: add the tokenize stage)")
        return None
    return Section(
        "tokens",
        "Tokens per source",
        f"{counted(bars.total(), 'token')} in all, from the shards' sidecars.",
        _bars(bars, "Tokens per source"),
    )


def mixture(ctx: Context) -> list[Section]:
    if ctx.mix_dir is None:
        ctx.missing.append("mixture (give a MIX_DIR made by prep mix)")
        return []
    mix = read_mixture(ctx.mix_dir)
    sections = [
        Section(
            "mixture",
            "Mixture composition",
            f"Share of each source's tokens over training ({counted(mix.tokens, 'token')}, "
            f"{counted(mix.positions, 'document')}, {counted(len(mix.centres), 'bin')}); the dashed lines are "
            "the target shares (the mix's weights, per phase), where each band's top edge should lie.",
            svg.stacked_area(
                mix.centres,
                mix.shares,
                "Source shares over training position",
                "training tokens",
                (0, mix.tokens),
                mix.targets,
            ),
        )
    ]
    if mix.key_means:
        sections.append(
            Section(
                "curriculum",
                "Curriculum",
                f"Curriculum {mix.curriculum!r}: mean key ({mix.key_label}) of each source's documents per bin, "
                "over training.",
                svg.lines(
                    mix.centres,
                    mix.key_means,
                    f"Curriculum key over position: {mix.key_label}",
                    "training tokens",
                    mix.key_label,
                    (0, mix.tokens),
                ),
            )
        )
    else:
        ctx.missing.append("curriculum (the mixture has curriculum none)")
    return sections


def cpu(ctx: Context) -> Section | None:
    bars = collect.cpu_seconds(ctx.cost)
    if bars is None:
        ctx.missing.append("CPU time (no cost.json)")
        return None
    caption = (
        f"CPU seconds per stage, {ctx.cost['cpu_seconds'].get('total', bars.total()):,.1f} in all; "
        f"workers: {ctx.cost.get('workers', '?')}."
    )
    projection = ctx.cost.get("projection")
    if projection:
        caption += (
            f" Projected full run: {projection['core_hours']:,} core-hours ({ledger.clip(projection['note'], 300)})."
        )
    return Section("cpu", "CPU time per stage", caption, _bars(bars, "CPU seconds per stage", " s"))


def rejected_examples(ctx: Context) -> Section | None:
    found = ledger.examples(ledger.ledger_files(ctx.layout, ctx.sources))
    if not found:
        ctx.missing.append("rejected examples (the ledger is empty)")
        return None
    # Folded, one <details> a rule, closed: open they were four fifths of the page's height.
    parts = []
    for rule, examples in found.items():
        rejected = sum(source["rejected_by"].get(rule, 0) for source in ctx.manifest["sources"].values())
        items = []
        for example in examples:
            meta = " · ".join(svg.esc(x) for x in dict.fromkeys((example.id, example.where, example.detail)) if x)
            items.append(
                f'<div class="example"><div class="where">{meta}</div>'
                f"<pre>{svg.esc(example.text) or '<i>(no text)</i>'}</pre></div>"
            )
        parts.append(
            f"<details><summary><b>{svg.esc(rule)}</b> · {rejected:,} rejected, {len(examples)} shown</summary>"
            f"{''.join(items)}</details>"
        )
    caption = (
        f"Up to {ledger.EXAMPLES_PER_RULE} documents per rule (those whose ids hash lowest), "
        f"cut at {ledger.EXAMPLE_CHARS} characters; open a rule to see them."
    )
    return Section("examples", "Rejected examples", caption, "".join(parts))


def absent_folders(ctx: Context) -> None:
    """Name, under "not in this run", each source folder the manifest counts documents in
    that the run folder lacks (deleted, not copied, a file in its place): the charts read
    from those folders would otherwise just draw fewer documents, without saying why."""
    for what, folder_of, count in (
        ("kept document", ctx.layout.docs, "output"),
        ("reject", ctx.layout.rejects, "rejected"),
    ):
        for source, counts in ctx.manifest["sources"].items():
            folder = folder_of(source)
            if counts[count] and not folder.is_dir():
                ctx.missing.append(
                    f"the {counted(counts[count], what)} of {source}: {folder} is not a folder, so the lengths, "
                    "languages, scores and examples leave them out"
                )


def build_sections(ctx: Context) -> list[Section]:
    """All sections in page order; those without data are left out (see ``ctx.missing``)."""
    absent_folders(ctx)
    built = [
        balance(ctx),
        drops_per_stage(ctx),
        drops_per_rule(ctx),
        length_distributions(ctx),
        languages(ctx),
        classifier_scores(ctx),
        duplicate_clusters(ctx),
        pii(ctx),
        tokens_per_source(ctx),
        *mixture(ctx),
        cpu(ctx),
        rejected_examples(ctx),
    ]
    return [s for s in built if s is not None]
