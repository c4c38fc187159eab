import type { ComponentChildren } from 'preact';
import type { ApiError } from '../api/errors';
import { absoluteTime, humanize, relativeTime } from '../format';

/** A relative time with the absolute one as its tooltip. */
export function RelTime({ iso, now }: { iso: string | null | undefined; now: number }) {
  if (!iso) return <span class="muted">—</span>;
  return (
    <time dateTime={iso} title={absoluteTime(iso)}>
      {relativeTime(iso, now)}
    </time>
  );
}

/** A phase or state as a coloured badge with its name in words. */
export function Badge({ value }: { value: string }) {
  return <span class={`badge badge-${value.toLowerCase().replace(/_/g, '-')}`}>{humanize(value)}</span>;
}

/** An API error: the problem's title and detail. */
export function ProblemBox({ error }: { error: ApiError | null }) {
  if (!error) return null;
  return (
    <div class="problem" role="alert">
      <strong>{error.title}</strong>
      <p>{error.detail}</p>
    </div>
  );
}

/** A loading line that keeps its place. */
export function Loading({ what }: { what: string }) {
  return (
    <p class="loading" role="status">
      Loading {what}…
    </p>
  );
}

/** What an empty list says. */
export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

/** Load against capacity as a bar, with the numbers in words for screen readers. */
export function LoadBar({ used, capacity, unit }: { used: number; capacity: number; unit: string }) {
  // No capacity (e.g. a pool without DataStores) draws an empty bar, full only when something uses it.
  const ratio = capacity > 0 ? Math.min(used / capacity, 1) : used > 0 ? 1 : 0;
  const level = ratio >= 0.9 ? 'high' : ratio >= 0.7 ? 'mid' : 'low';
  const label = capacity > 0 ? `${used} of ${capacity} ${unit}` : `${used} ${unit}, no capacity`;
  return (
    <span class="loadbar">
      <svg class={`bar bar-${level}`} viewBox="0 0 100 8" preserveAspectRatio="none" role="img" aria-label={label}>
        <rect class="bar-track" x="0" y="0" width="100" height="8" rx="2" />
        <rect class="bar-fill" x="0" y="0" width={(ratio * 100).toFixed(1)} height="8" rx="2" />
      </svg>
      <span class="bar-text" aria-hidden="true">
        {used}/{capacity}
      </span>
    </span>
  );
}

/** A section with a heading, for a detail page. */
export function Section({ title, id, children }: { title: string; id: string; children: ComponentChildren }) {
  return (
    <section class="card" aria-labelledby={id}>
      <h2 id={id}>{title}</h2>
      {children}
    </section>
  );
}
