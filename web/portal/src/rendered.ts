/** Marks the first time a page shows its data (`portal-rendered`, read by the browser test's load timing). */
let marked = false;

export function markRendered(): void {
  if (marked) return;
  marked = true;
  performance.mark('portal-rendered');
  document.documentElement.dataset.rendered = 'true';
}
