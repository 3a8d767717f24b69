// @ts-check
/**
 * @file The page's run state on `<body data-state>` (CSS and automation key on it) and the `#toast` line.
 * @module page/ui/page_state
 */

/** @typedef {'idle' | 'running' | 'done' | 'error'} PageState */

/** @param {PageState} state */
export function setState(state) {
    document.body.dataset.state = state;
}

/** @returns {PageState} */
export function currentState() {
    return /** @type {PageState} */ (document.body.dataset.state ?? 'idle');
}

/** A short message in `#toast` (role=status), cleared after a few seconds. */
export class Toast {
    /** @param {HTMLElement} element */
    constructor(element) {
        this.element = element;
    }

    /** @param {string} text */
    announce(text) {
        this.element.textContent = text;
        clearTimeout(Number(this.element.dataset.timer));
        this.element.dataset.timer = String(setTimeout(() => (this.element.textContent = ''), 4000));
    }
}
