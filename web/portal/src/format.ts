/** How long ago (or until) `iso` is, in words: `3 min ago`, `in 2 h`. */
export function relativeTime(iso: string, now: number): string {
  const seconds = Math.round((Date.parse(iso) - now) / 1000);
  const abs = Math.abs(seconds);
  const [value, unit] =
    abs < 45 ? [abs, 's'] : abs < 2700 ? [Math.round(abs / 60), 'min'] : abs < 86400 ? [Math.round(abs / 3600), 'h'] : [Math.round(abs / 86400), 'd'];
  if (unit === 's' && abs < 5) return 'just now';
  return seconds < 0 ? `${value} ${unit} ago` : `in ${value} ${unit}`;
}

/** The absolute time, in UTC, for tooltips. */
export function absoluteTime(iso: string): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

/** `PROVISIONING` → `Provisioning`, `NOT_READY` → `Not ready`. */
export function humanize(value: string): string {
  const words = value.replace(/([a-z])([A-Z])/g, '$1 $2').replace(/[_-]+/g, ' ').toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}
