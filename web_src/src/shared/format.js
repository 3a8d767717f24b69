// @ts-check
/**
 * @file Human-readable numbers: bytes, durations, rates. The one formatter of each kind, so a size reads
 * the same in an error message from the worker and in the page's panels. Pure functions, no DOM.
 * @module shared/format
 */

const BYTE_UNITS = Object.freeze(['B', 'kB', 'MB', 'GB', 'TB']);

/**
 * Decimal SI units (1 kB = 1000 bytes, 1 GB = 1e9 bytes), as browsers and the Hub show file sizes; three
 * significant digits (527 MB, 1.25 GB).
 * @param {number} bytes
 * @returns {string}
 */
export function formatBytes(bytes) {
    if (!Number.isFinite(bytes) || bytes < 0) return '–';
    let value = bytes;
    let unit = 0;
    while (value >= 1000 && unit < BYTE_UNITS.length - 1) {
        value /= 1000;
        unit += 1;
    }
    const digits = unit === 0 || value >= 100 ? 0 : value >= 10 ? 1 : 2;
    return `${value.toFixed(digits)} ${BYTE_UNITS[unit]}`;
}

/**
 * Binary units for device limits (maxBufferSize is a power of two: 1 GiB reads better than 1.07 GB).
 * @param {number} bytes
 * @returns {string}
 */
export function formatBinaryBytes(bytes) {
    if (!Number.isFinite(bytes) || bytes < 0) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let value = bytes;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
        value /= 1024;
        unit += 1;
    }
    return `${Number.isInteger(value) ? value : value.toFixed(1)} ${units[unit]}`;
}

/**
 * @param {number} bytesPerSecond
 * @returns {string}
 */
export function formatRate(bytesPerSecond) {
    if (!Number.isFinite(bytesPerSecond) || bytesPerSecond <= 0) return '–';
    return `${formatBytes(bytesPerSecond)}/s`;
}

/**
 * Compact durations: 850 ms, 4.2 s, 1 min 05 s, 1 h 02 min.
 * @param {number} ms
 * @returns {string}
 */
export function formatDuration(ms) {
    if (!Number.isFinite(ms) || ms < 0) return '–';
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const seconds = ms / 1000;
    if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
    const totalSeconds = Math.round(seconds);
    const minutes = Math.floor(totalSeconds / 60);
    if (minutes < 60) return `${minutes} min ${String(totalSeconds % 60).padStart(2, '0')} s`;
    return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} min`;
}

/**
 * Whole seconds for a ticking clock: 7 s, 1 min 05 s (tenths would flicker at one update a second).
 * @param {number} ms
 * @returns {string}
 */
export function formatSeconds(ms) {
    if (!Number.isFinite(ms) || ms < 0) return '–';
    const seconds = Math.round(ms / 1000);
    return seconds < 60 ? `${seconds} s` : formatDuration(seconds * 1000);
}
