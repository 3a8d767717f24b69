// @ts-check
/** @file shared/format: the byte, rate and duration formatters of the page, the pipeline and the store. @module tests/js/test_format */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
    formatBinaryBytes,
    formatBytes,
    formatDuration,
    formatRate,
    formatSeconds,
} from '../../web_src/src/shared/format.js';

test('formatBytes uses decimal SI units with three significant digits', () => {
    const cases = [
        [0, '0 B'],
        [999, '999 B'],
        [1000, '1.00 kB'],
        [15_700, '15.7 kB'],
        [527_155_200, '527 MB'],
        [134_217_728, '134 MB'],
        [1_250_000_000, '1.25 GB'],
        [5.6e9, '5.60 GB'],
        [2.5e12, '2.50 TB'],
        [3e15, '3000 TB'],
    ];
    for (const [bytes, text] of /** @type {[number, string][]} */ (cases)) {
        assert.equal(formatBytes(bytes), text, String(bytes));
    }
});

test('every formatter shows a dash for values that are not a size or a duration', () => {
    for (const format of [formatBytes, formatBinaryBytes, formatDuration, formatSeconds, formatRate]) {
        for (const bad of [NaN, -1, Infinity]) assert.equal(format(bad), '–', `${format.name}(${bad})`);
    }
    assert.equal(formatRate(0), '–');
});

test('formatBinaryBytes names device limits in powers of two', () => {
    assert.equal(formatBinaryBytes(2 ** 30), '1 GiB');
    assert.equal(formatBinaryBytes(128 * 2 ** 20), '128 MiB');
    assert.equal(formatBinaryBytes(1.5 * 2 ** 30), '1.5 GiB');
});

test('durations: milliseconds, seconds, minutes and hours', () => {
    assert.equal(formatDuration(850), '850 ms');
    assert.equal(formatDuration(4200), '4.2 s');
    assert.equal(formatDuration(42_000), '42 s');
    assert.equal(formatDuration(65_000), '1 min 05 s');
    assert.equal(formatDuration(3_720_000), '1 h 02 min');
    assert.equal(formatSeconds(7_400), '7 s');
    assert.equal(formatSeconds(65_000), '1 min 05 s');
    assert.equal(formatRate(12_500_000), '12.5 MB/s');
});
