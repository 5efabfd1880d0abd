// Small pieces every view draws with: a status line, a table's rows (or the line saying it has
// none), numbers and ages as people read them.
import { el } from "./messages.js";

export function formatNumber(value) {
  return Number(value).toLocaleString("en-US");
}

/** "1 file", "3 files". */
export function plural(count, word) {
  return `${formatNumber(count)} ${word}${count === 1 ? "" : "s"}`;
}

/** `text` in `node`, red when `bad`. */
export function say(node, text, bad = false) {
  node.textContent = text;
  node.classList.toggle("error", bad);
  node.classList.toggle("muted", !bad);
}

/** `items` as `tbody`'s rows, or one row saying `empty` across every column. */
export function rows(tbody, items, empty) {
  if (items.length) {
    tbody.replaceChildren(...items);
    return;
  }
  const columns = tbody.closest("table").querySelectorAll("thead th").length;
  tbody.replaceChildren(el("tr", { className: "empty" }, [el("td", { colspan: String(columns), className: "muted", text: empty })]));
}

export function formatAge(ms) {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 120) return `${seconds} s`;
  const minutes = Math.round(seconds / 60);
  return minutes < 120 ? `${minutes} min` : `${Math.round(minutes / 60)} h`;
}
