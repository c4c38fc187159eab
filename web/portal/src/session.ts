/** The signed-in token: kept in session storage (this tab only), never in localStorage. */
const KEY = 'tenantplane.portal.token';

/** Takes a token from `#token=<jwt>` into session storage and removes it from the URL. */
export function adoptTokenFromHash(): void {
  const match = /(?:^#|[&#])token=([^&]+)/.exec(location.hash);
  if (!match) return;
  sessionStorage.setItem(KEY, decodeURIComponent(match[1]!));
  history.replaceState(null, '', `${location.pathname}${location.search}#/`);
}

/** The current token, if any. */
export function currentToken(): string | null {
  return sessionStorage.getItem(KEY);
}

/** Stores a pasted token. */
export function signIn(token: string): void {
  sessionStorage.setItem(KEY, token.trim());
}

/** Forgets the token. */
export function signOut(): void {
  sessionStorage.removeItem(KEY);
}
