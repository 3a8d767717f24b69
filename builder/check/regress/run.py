"""`klein-web regress`: drive the built app in Chromium like a user and compare its PNG with a reference.

One run, in numbered stages (`main`):

    1. Check inputs: the cases (one from the flags, or several from a JSON/TOML file: check/regress/cases.py;
       their input images decoded as `reference` decodes them; with --shard only this shard's: shards.py), where
       the browser runs and finds the app (where.py), the model folder, the --report folder and each
       --reference PNG (read at this stage), before anything slow starts.
    2. Check the browser (a Chromium here; with --connect, the browser server's is checked once attached).
    3. Build dist/ if stale (or take --dist as it is) and serve it plus the model folder (in a thread) on
       --host/--port, a free loopback port by default; with --app-url nothing is served.
    4. Launch Chromium once (a persistent profile, --profile or a temp dir: the model store needs real
       storage), or attach to the browser server (a new in-memory context), and check that the page is a
       secure context with a WebGPU adapter.
    5. For each case: type the prompt, set seed/size/steps, click Generate, wait for the app's state,
       click Download PNG and take the real browser download (check/regress/page.py).
       A --reference-from-cpu reference is made now, with the graph variants the app reports it ran
       (a repo holding q4 and fp32 graphs is then compared like with like).
    6. Compare with the reference, write the report folder, print a one-screen summary (check/regress/report.py).

Verdicts and exit codes: 0 pass (PSNR >= --psnr-min, same size), 1 fail (lower PSNR, another size, or the
app itself reported degenerate output: NaN or a constant image is a wrong result, not a broken
environment), 2 could not run (no model folder, no browser, no reference, no WebGPU adapter or --gpu with
only the SwiftShader one, timeout, any other error the app showed). Could-not-run conditions raise
RegressionError with a one-line reason (after the report is written, when a case got that far); cli/regress.py
prints it as "could not run: ...".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from builder.check.driver.serving import check_models, serving, site
from builder.check.driver.session import BrowserSession, connected, launched, local_session, probe_adapter
from builder.check.regress import report_folder, shards, where
from builder.check.regress.cases import Case, RegressOptions, cases_from_options
from builder.check.regress.page import AppReportedDegenerate, CaseCouldNotRun, run_case
from builder.check.regress.report import (
    COULD_NOT_RUN,
    FAIL,
    REPORT_NAME,
    AppRun,
    CaseReport,
    Reference,
    compare,
    summary_lines,
    worst_exit_code,
    write_browser_log,
    write_case_report,
    write_run_report,
)
from builder.check.regress.where import page_url
from builder.errors import InputError, KleinWebError, RegressionError
from builder.pipeline import imaging
from builder.repo import manifest
from builder.repo.files import check_output_folder

Log = Callable[[str], None]


def main(options: RegressOptions, *, log: Log) -> int:
    """Run every case (of this --shard) in one browser; return the worst exit code (0 pass, 1 fail, 2 could not run)."""
    # 1. Check inputs: everything that can be wrong before a browser starts.
    if not options.timeout_s > 0:
        raise InputError(f"--timeout {options.timeout_s}: must be a positive number of seconds, e.g. 600.")
    shard = shards.parse_shard(options.shard) if options.shard is not None else None
    if shard is not None and options.cases_file is None:
        raise InputError(f"--shard {shard.label} splits a cases file between runs; give --cases FILE.")
    where.check(options)
    all_cases = cases_from_options(options)
    chosen = shards.select(all_cases, shard)
    cases = [case for _position, case in chosen]
    models_dir, repo = check_models(options.models_dir, log=log)
    # The report is the run's result: find out now, not after the browser ran, that it cannot be written.
    report_dir = check_output_folder(Path(options.report_dir), what="--report", create=False)
    report_folder.check_report_folder(report_dir)
    # Reference files, before the browser is even asked its version, so an unreadable PNG stops the run early.
    references = {case.name: _read_reference(case.reference_png) for case in cases if case.reference_png is not None}
    identity = shards.run_identity(options, repo, cases_total=len(all_cases), shard=shard)
    if shard is not None:
        log(f"shard {shard.label}: {len(cases)} of {len(all_cases)} cases ({', '.join(c.name for c in cases)})")

    # 2. The browser: launched here, or a browser server's.
    session = _session(options)

    # 3. + 4. + 5. Serve (unless the app is deployed), open the browser once, run every case in it.
    reports: list[CaseReport] = []
    with contextlib.ExitStack() as stack:
        app = options.app_url
        if app is None:
            served = stack.enter_context(
                serving(
                    site(options.dist_dir, log=log),
                    models_dir,
                    log=log,
                    models_manifest=repo,
                    host=options.host,
                    port=options.port,
                )
            )
            app = options.advertise or served
        if options.connect is not None:
            stack.enter_context(connected(session, log=log))
        else:
            stack.enter_context(launched(session, log=log, profile=options.profile))
        log(f"the browser opens the app at {page_url(app, '/')}")
        session.adapter = probe_adapter(session, page_url(app, "/"))
        for position, case in chosen:
            report = _run_one(
                session,
                case,
                references.get(case.name),
                models_dir=models_dir,
                base_url=app,
                timeout_s=options.timeout_s,
                log=log,
            )
            report.position = position
            reports.append(report)

    # 6. Report and verdict. A shard always has the several-case layout, so that shards merge.
    single = len(cases) == 1 and shard is None
    browser = session.describe()
    if not single:
        (report_dir / REPORT_NAME).unlink(missing_ok=True)  # the run's report.json is written after every case's
    report_dir.mkdir(parents=True, exist_ok=True)
    report_folder.mark(report_dir)
    write_browser_log(report_dir, session.log)  # before any report.json, which each folder gets last
    for report in reports:
        write_case_report(
            report_dir if single else report_dir / report.name, report, browser=browser, adapter=session.adapter
        )
    if not single:
        write_run_report(report_dir, reports, browser=browser, adapter=session.adapter, run=identity)
    for line in summary_lines(reports, browser=browser, adapter=session.adapter, report_dir=report_dir):
        log(line)
    code = worst_exit_code(reports)
    if code == COULD_NOT_RUN.exit_code:
        failed = [r for r in reports if r.verdict is COULD_NOT_RUN]
        prefix = "" if single else f"{len(failed)} of {len(reports)} cases; {failed[0].name}: "
        raise RegressionError(f"{prefix}{failed[0].reason} (report: {report_dir})")
    return code


def _session(options: RegressOptions) -> BrowserSession:
    """The browser of the run: a browser server's (--connect), or a Chromium found here and checked."""
    if options.connect is not None:
        return BrowserSession(executable=None, endpoint=options.connect, gpu=options.gpu, headed=False)
    return local_session(
        Path(options.browser_path) if options.browser_path else None,
        gpu=options.gpu,
        headed=options.headed,
        f16_toggle=options.f16_toggle,
    )


def _run_one(
    session: BrowserSession,
    case: Case,
    reference: Reference | None,
    *,
    models_dir: Path,
    base_url: str,
    timeout_s: float,
    log: Log,
) -> CaseReport:
    """One case, start to verdict; a problem of this case never stops the others."""
    report = CaseReport(name=case.name, parameters=case.parameters(), reference=reference)
    report.app = run = AppRun()
    try:
        run_case(session, case, run, base_url=base_url, timeout_s=timeout_s, log=log)
        assert run.image is not None  # run_case either downloaded an image or raised
        if report.reference is None:
            report.reference = _cpu_reference(
                case, models_dir=models_dir, app_graphs=run.result_info.get("graphs"), log=log
            )
        report.comparison = compare(run.image, report.reference.image, psnr_min=case.psnr_min)
        report.verdict, report.reason = report.comparison.verdict, report.comparison.reason
    except AppReportedDegenerate as exc:
        report.verdict, report.reason = FAIL, f"the app reported degenerate output: {exc}"
    except (CaseCouldNotRun, KleinWebError) as exc:
        report.verdict, report.reason = COULD_NOT_RUN, str(exc)
    return report


def _read_reference(png: Path) -> Reference:
    image, _text = imaging.read_png(png)
    return Reference(source=str(png), image=image, png=png.read_bytes())


def _cpu_reference(case: Case, *, models_dir: Path, app_graphs: Any, log: Log) -> Reference:
    """builder.pipeline.reference for the case's parameters, pinned to the graph variants the app ran (when it said)."""
    from builder.pipeline import reference  # onnxruntime + tokenizers: only loaded when a CPU reference is asked for

    variants = {
        component: graph["variant"]
        for component, graph in (app_graphs or {}).items()
        if component in (*manifest.COMPONENTS, *manifest.OPTIONAL_COMPONENTS)
        and isinstance(graph, dict)
        and isinstance(graph.get("variant"), str)
    }
    log(
        f"[{case.name}] reference: running the pipeline on onnxruntime CPU "
        f"({', '.join(f'{c} {v}' for c, v in variants.items()) or 'default variants'}) ..."
    )
    started = time.perf_counter()
    result = reference.generate(
        models_dir,
        prompt=case.prompt,
        seed=case.seed,
        width=case.width,
        height=case.height,
        steps=case.steps,
        log=log,
        variants=variants or None,
        images=case.images,
        mask=case.mask,
        strength=case.strength_or_default,
        extend=dict(case.extend) or None,
        guidance_scale=case.guidance_scale,
        negative_prompt=case.negative_prompt,
    )
    return Reference(
        source="cpu", image=result.image, seconds=time.perf_counter() - started, variants=dict(result.variants)
    )
