// @ts-check
/**
 * @file Which browser this is, and how its user gets what the app needs when something is missing: the browser
 * versions and flags that turn WebGPU on, and where OPFS and large GPU buffers are found. Whether the app runs is
 * decided from the browser's capabilities (shared/browser_needs.js), never from its name; the name only picks the
 * advice.
 * @module page/ui/browser_support
 */

/**
 * @typedef {Object} BrowserInfo
 * @property {'Chrome' | 'Edge' | 'Opera' | 'Chromium' | 'Firefox' | 'Safari' | 'Unknown'} name
 * @property {number | null} version   Major version.
 * @property {'Windows' | 'macOS' | 'Linux' | 'ChromeOS' | 'Android' | 'iOS' | 'Unknown'} os
 * @property {boolean} mobile
 */

/** Chrome shipped WebGPU in 113 (Windows, macOS, ChromeOS). */
export const MIN_CHROME = 113;
/** Chrome on Android has WebGPU from 121 (Android 12+, Qualcomm and ARM GPUs). */
export const MIN_CHROME_ANDROID = 121;
/** Safari ships WebGPU from 26 (macOS, iOS, iPadOS). */
export const MIN_SAFARI = 26;
/** Firefox has WebGPU on by default on Windows from 141 and on Apple-silicon macOS from 145. */
export const MIN_FIREFOX_WINDOWS = 141;
export const MIN_FIREFOX_MAC = 145;

export const SUPPORT_NOTE =
    'Runs where the browser gives a worker WebGPU and the Origin Private File System: Chrome and Edge 113+, Safari 26, ' +
    'Firefox 141+ on Windows and 145+ on Apple-silicon Macs, with a GPU. The model (4 to 6 GB for klein-4B, about twice that for klein-9B) is downloaded once, then cached.';

/**
 * @param {{userAgent: string}} nav  `navigator`
 * @returns {BrowserInfo}
 */
export function detectBrowser(nav) {
    const ua = nav.userAgent;
    /** @type {BrowserInfo['os']} */
    const os = /iPhone|iPad|iPod/.test(ua)
        ? 'iOS'
        : /Android/.test(ua)
          ? 'Android'
          : /CrOS/.test(ua)
            ? 'ChromeOS'
            : /Windows/.test(ua)
              ? 'Windows'
              : /Mac OS X|Macintosh/.test(ua)
                ? 'macOS'
                : /Linux/.test(ua)
                  ? 'Linux'
                  : 'Unknown';
    const mobile = os === 'iOS' || os === 'Android' || /Mobile/.test(ua);
    /** @type {[BrowserInfo['name'], RegExp][]} */
    const patterns = [
        ['Edge', /Edg\/(\d+)/],
        ['Opera', /OPR\/(\d+)/],
        ['Firefox', /(?:Firefox|FxiOS)\/(\d+)/],
        ['Chrome', /(?:Chrome|CriOS)\/(\d+)/],
        ['Safari', /Version\/(\d+).*Safari/],
    ];
    for (const [name, pattern] of patterns) {
        const match = pattern.exec(ua);
        if (match) {
            const isChromium = name === 'Chrome' && /Chromium|HeadlessChrome/.test(ua);
            return { name: isChromium ? 'Chromium' : name, version: Number(match[1]), os, mobile };
        }
    }
    return { name: 'Unknown', version: null, os, mobile };
}

/**
 * What this user can do to get a WebGPU adapter, in one or two sentences: the browser version or the flags that
 * turn WebGPU on. Flags and chrome:// pages are in `backticks` (rendered as code by error_view.renderInline).
 * @param {BrowserInfo} browser
 * @param {{adapterMissing?: boolean}} [found]  `adapterMissing`: navigator.gpu is there but gave no adapter.
 * @returns {string}
 */
export function webgpuAdvice(browser, { adapterMissing = false } = {}) {
    const { name, version, os } = browser;
    if (name === 'Firefox') {
        if (os === 'Windows' && version !== null && version < MIN_FIREFOX_WINDOWS) {
            return `Firefox ${version} has no WebGPU yet: update to Firefox ${MIN_FIREFOX_WINDOWS} or newer and reload.`;
        }
        if (os === 'macOS' && version !== null && version < MIN_FIREFOX_MAC) {
            return `Firefox ${version} has no WebGPU on macOS yet: update to Firefox ${MIN_FIREFOX_MAC} or newer (Apple-silicon Macs) and reload.`;
        }
        return 'Firefox has WebGPU on by default only on Windows and Apple-silicon Macs. Elsewhere set `dom.webgpu.enabled` and `dom.webgpu.workers.enabled` to true in `about:config` and reload; if WebGPU is on and still has no adapter, update the GPU driver.';
    }
    if (os === 'iOS') {
        return `Every browser on iPhone and iPad uses Safari's engine, which has WebGPU from iOS ${MIN_SAFARI}: update the system and reload.`;
    }
    if (name === 'Safari') {
        if (version !== null && version < MIN_SAFARI) {
            return `Safari ${version} has no WebGPU: update to Safari ${MIN_SAFARI} or newer (or turn on WebGPU under Develop > Feature Flags) and reload.`;
        }
        return 'Safari found no usable GPU. Check that WebGPU is not turned off under Develop > Feature Flags, then reload.';
    }
    if (name === 'Unknown')
        return `Use a browser with WebGPU: Chrome or Edge ${MIN_CHROME}+, Safari ${MIN_SAFARI}+, or Firefox ${MIN_FIREFOX_WINDOWS}+ on Windows.`;
    if (os === 'Android') {
        if (version !== null && version < MIN_CHROME_ANDROID) {
            return `${name} ${version} has no WebGPU on Android: update to ${MIN_CHROME_ANDROID} or newer (Android 12+ with a Qualcomm or ARM GPU) and reload.`;
        }
        return `WebGPU on Android needs Android 12 or newer and a Qualcomm or ARM GPU; on other phones \`chrome://flags/#enable-unsafe-webgpu\` may turn it on.`;
    }
    if (version !== null && version < MIN_CHROME) {
        return `${name} ${version} is too old: WebGPU arrived in ${name} ${MIN_CHROME}. Update the browser and reload.`;
    }
    // Brave's Shields (and other fingerprinting protections) can hide the adapter from a site.
    const shields = adapterMissing
        ? ' A privacy setting can hide the GPU from a site too (in Brave: turn Shields off for this site).'
        : '';
    if (os === 'Linux') {
        return `WebGPU is still off by default in ${name} on Linux. Start it with \`--enable-unsafe-webgpu --enable-features=Vulkan\` (on NVIDIA add \`--enable-dawn-features=vulkan_enable_f16_on_nvidia\` for the fast fp16 path) (or enable \`chrome://flags/#enable-unsafe-webgpu\` and \`chrome://flags/#enable-vulkan\`), then check that \`chrome://gpu\` says "WebGPU: Hardware accelerated".${shields}`;
    }
    return `${name} found no usable GPU. Turn on "Use graphics acceleration when available" (\`chrome://settings/system\`), update the GPU driver, and check \`chrome://gpu\` for "WebGPU: Hardware accelerated"; a blocklisted GPU can be tried with \`chrome://flags/#enable-unsafe-webgpu\`.${shields}`;
}

/**
 * How to get what the capability decision found missing (shared/browser_needs.js), one sentence or two per need.
 * @param {import('../../shared/browser_needs.js').Missing} missing
 * @param {BrowserInfo} browser
 * @returns {string}
 */
export function missingAdvice(missing, browser) {
    switch (missing.need) {
        case 'webgpu':
            return webgpuAdvice(browser);
        case 'adapter':
            return webgpuAdvice(browser, { adapterMissing: true });
        case 'opfs':
            return 'The Origin Private File System is in Chrome and Edge 102+, Safari 15.2+ and Firefox 111+, in normal windows: a private window may have none. Open the app in a normal window of an up-to-date browser.';
        case 'sync-access-handle':
            return 'Sync access handles in workers are in Chrome and Edge 102+, Safari 15.2+ and Firefox 111+: update the browser and reload.';
        case 'buffer-size':
            return "The limit is the GPU driver's and the browser's, not a setting: use a computer whose browser offers GPU buffers of 1 GiB or more (desktop Chrome, Edge, Safari 26 and Firefox do on most laptops and desktops).";
    }
}
