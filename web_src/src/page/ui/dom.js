// @ts-check
/**
 * @file DOM lookups shared by every view of the page.
 * @module page/ui/dom
 */

/**
 * The element `#id` under `root`, checked to be a `type` (a missing or renamed element in index.html
 * fails loudly at start-up instead of as an undefined later).
 * @template {HTMLElement} T
 * @param {ParentNode} root
 * @param {string} id
 * @param {new (...args: any[]) => T} type
 * @returns {T}
 */
export function requireElement(root, id, type) {
    const element = root.querySelector(`#${id}`);
    if (!(element instanceof type)) throw new Error(`index.html is missing #${id} (a ${type.name}).`);
    return element;
}

/**
 * An element holding only text: a table cell, a caption, a list item.
 * @param {string} tag
 * @param {string} text
 * @param {string} [className]
 * @returns {HTMLElement}
 */
export function cell(tag, text, className) {
    const element = document.createElement(tag);
    element.textContent = text;
    if (className) element.className = className;
    return element;
}
