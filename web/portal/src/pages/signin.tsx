import { useState } from 'preact/hooks';
import type { ApiError } from '../api/errors';
import { ProblemBox } from '../components/bits';
import { TextAreaField } from '../components/field';
import { usePageTitle } from '../hooks';

/** Sign-in with a pasted token (a `#token=` link signs in without this page). */
export function SignInPage({ error, onSignIn }: { error: ApiError | null; onSignIn: (token: string) => void }) {
  usePageTitle('Sign in');
  const [token, setToken] = useState('');
  const [missing, setMissing] = useState(false);
  const submit = (e: Event) => {
    e.preventDefault();
    if (!token.trim()) return setMissing(true);
    onSignIn(token.trim());
  };
  return (
    <main id="main" class="signin">
      <h1>Sign in to Tenantplane</h1>
      <p>Paste a Tenantplane token (a tenant's token, or a platform admin's). It stays in this tab only.</p>
      <ProblemBox error={error} />
      <form onSubmit={submit} noValidate>
        <TextAreaField
          id="token"
          label="Token"
          value={token}
          rows={4}
          hint="The bearer token, e.g. from `tenantplane token mint` or `make run`."
          error={missing ? 'Paste a token first.' : undefined}
          onInput={(v) => {
            setToken(v);
            setMissing(false);
          }}
        />
        <button type="submit">Sign in</button>
      </form>
    </main>
  );
}
