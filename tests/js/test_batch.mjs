// @ts-check
/**
 * @file Node tests of page/batch.js (the seeds of a batch, its count, the state of one batch) and of
 * page/run_request.js (what each image of it asks the worker). @module tests/js/test_batch
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { BATCH_MAX, BatchRun, batchSeeds, parseBatchCount } from '../../web_src/src/page/batch.js';
import { runRequest } from '../../web_src/src/page/run_request.js';
import { InputError } from '../../web_src/src/shared/errors.js';
import { LIMITS } from '../../web_src/src/shared/limits.js';

/** @returns {() => number} A stand-in for randomSeed: 100, 101, … and a count of its calls. */
function counter() {
    let next = 100;
    return () => next++;
}

test('a sequence batch runs seed, seed + 1, … and wraps at 2^32', () => {
    const never = () => assert.fail('a sequence batch draws no random seed');
    assert.deepEqual(batchSeeds(1234, 3, 'sequence', never), [1234, 1235, 1236]);
    assert.deepEqual(batchSeeds(LIMITS.seedMax - 2, 4, 'sequence', never), [
        LIMITS.seedMax - 2,
        LIMITS.seedMax - 1,
        0,
        1,
    ]);
    assert.deepEqual(batchSeeds(7, 1, 'sequence', never), [7]);
});

test("a random batch starts at the form's seed and draws one seed for each further image", () => {
    assert.deepEqual(batchSeeds(1234, 4, 'random', counter()), [1234, 100, 101, 102]);
    assert.deepEqual(
        batchSeeds(9, 1, 'random', () => assert.fail('one image draws nothing')),
        [9],
    );
});

test('the count is a whole number from 1 to BATCH_MAX, and a bad one names the field', () => {
    assert.equal(parseBatchCount(' 3 ', 'Images'), 3);
    assert.equal(parseBatchCount(String(BATCH_MAX), 'Images'), BATCH_MAX);
    for (const bad of ['0', String(BATCH_MAX + 1), '2.5', '-1', '', 'many']) {
        assert.throws(
            () => parseBatchCount(bad, 'Images'),
            (err) =>
                err instanceof InputError && err.message.startsWith('Images must be') && err.detail?.field === 'batch',
            bad,
        );
    }
});

test('a batch runs its images in order and ends done with the wall time and the time per image', () => {
    const batch = new BatchRun([5, 6, 7], 1000);
    assert.equal(batch.label(1), 'Image 2 of 3');
    for (const [index, totalMs] of [
        [0, 400],
        [1, 300],
        [2, 350],
    ]) {
        assert.equal(batch.next(), index);
        assert.equal(batch.items[index].state, 'running');
        batch.finish(index, totalMs);
    }
    assert.equal(batch.next(), null);
    batch.end('done', 2500);
    assert.deepEqual(
        batch.items.map((item) => [item.seed, item.state, item.totalMs]),
        [
            [5, 'done', 400],
            [6, 'done', 300],
            [7, 'done', 350],
        ],
    );
    assert.equal(batch.wallMs(), 1500);
    assert.equal(batch.endText('done'), 'Done: 3 images in 1.5 s (500 ms per image).');
});

test('a cancel during the second image keeps the first, stops the second and runs no further one', () => {
    const batch = new BatchRun([5, 6, 7], 0);
    batch.finish(/** @type {number} */ (batch.next()), 400);
    assert.equal(batch.next(), 1);
    batch.cancel();
    assert.equal(batch.next(), null, 'nothing starts after a cancel');
    batch.end('cancelled', 900);
    assert.deepEqual(
        batch.items.map((item) => item.state),
        ['done', 'cancelled', 'skipped'],
    );
    assert.equal(batch.doneCount, 1);
    assert.equal(batch.endText('cancelled'), 'Cancelled after 1 of 3 images.');
    assert.throws(() => batch.finish(1, 10), /is cancelled, not running/);
});

test('a failed image ends the batch: the rest are not run', () => {
    const batch = new BatchRun([5, 6], 0);
    batch.next();
    batch.end('failed', 10);
    assert.deepEqual(
        batch.items.map((item) => item.state),
        ['failed', 'skipped'],
    );
    assert.equal(batch.next(), null);
});

test('a batch of one says what a single run says', () => {
    const batch = new BatchRun([5], 0);
    assert.equal(batch.label(0), '');
    batch.finish(/** @type {number} */ (batch.next()), 1234);
    batch.end('done', 5000);
    assert.equal(batch.endText('done'), 'Done in 1.2 s.');
    assert.equal(new BatchRun([5], 0).endText('cancelled'), 'Cancelled.');
});

test('each image asks for its own seed; history keeps neither the image bytes nor the profiling', () => {
    const values = { prompt: 'a fox', seed: 6, steps: 4, width: 64, height: 64 };
    const source = {
        base: 'http://x/models/',
        kind: /** @type {const} */ ('local'),
        label: 'Local',
        precision: 'fp32',
        profile: true,
    };
    const image = { name: 'a.png', bytes: new ArrayBuffer(4) };
    const { settings, params } = runRequest(values, source, 'lean', { images: [image] });
    assert.deepEqual(settings, { ...values, modelBase: 'http://x/models/', precision: 'fp32', memory: 'lean' });
    assert.deepEqual(params, { ...settings, profile: true, images: [image] });
    const plain = runRequest(values, { base: 'http://x/', kind: 'url', label: 'x' }, undefined, {});
    assert.deepEqual(plain.params, { ...values, modelBase: 'http://x/' });
});
