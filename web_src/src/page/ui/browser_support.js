// @ts-check
/**
 * @file Which browser this is, and what to tell its user when WebGPU is missing: the supported
 * browsers, the exact flags, and why Safari and Firefox are not supported yet.
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

export const SUPPORT_NOTE =
    'Works in desktop Chrome and Edge 113+ with a GPU (about 5.6 GB is downloaded once, then cached). Safari and ' +
    'Firefox are not supported yet: their WebGPU is recent and has not been verified with ONNX Runtime Web and a model this large.';

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
 * What this user can do to get a WebGPU adapter, in one or two sentences. Flags and chrome:// pages are
 * in `backticks` (rendered as code by error_view.renderInline).
 * @param {BrowserInfo} browser
 * @returns {string}
 */
export function webgpuAdvice(browser) {
    const { name, version, os, mobile } = browser;
    if (name === 'Firefox') {
        return 'Firefox is not supported yet: its WebGPU is recent (on by default only on Windows) and has not been verified with ONNX Runtime Web and this 5.6 GB model. Use desktop Chrome or Edge 113 or newer.';
    }
    if (name === 'Safari') {
        return 'Safari is not supported yet: its WebGPU is recent and has not been verified with ONNX Runtime Web and this 5.6 GB model, and iPhone/iPad tabs get far less memory than the model needs. Use desktop Chrome or Edge 113 or newer.';
    }
    if (mobile) {
        return 'Phones and tablets are not supported: the model needs about 6 GB of GPU memory. Use desktop Chrome or Edge 113 or newer on a computer with a GPU.';
    }
    if (name === 'Unknown') return 'Use desktop Chrome or Edge 113 or newer.';
    if (version !== null && version < MIN_CHROME) {
        return `${name} ${version} is too old: WebGPU arrived in ${name} ${MIN_CHROME}. Update the browser and reload.`;
    }
    if (os === 'Linux') {
        return `WebGPU is still off by default in ${name} on Linux. Start it with \`--enable-unsafe-webgpu --enable-features=Vulkan\` (on NVIDIA add \`--enable-dawn-features=vulkan_enable_f16_on_nvidia\` for the fast fp16 path) (or enable \`chrome://flags/#enable-unsafe-webgpu\` and \`chrome://flags/#enable-vulkan\`), then check that \`chrome://gpu\` says "WebGPU: Hardware accelerated".`;
    }
    return `${name} found no usable GPU. Turn on "Use graphics acceleration when available" (\`chrome://settings/system\`), update the GPU driver, and check \`chrome://gpu\` for "WebGPU: Hardware accelerated"; a blocklisted GPU can be tried with \`chrome://flags/#enable-unsafe-webgpu\`.`;
}
