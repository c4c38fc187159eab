import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { request, setUnauthorizedHandler } from './api/client';
import { ApiError, asApiError } from './api/errors';
import { closeLive } from './api/live';
import { Loading } from './components/bits';
import { Layout } from './components/layout';
import { ViewerDocument } from './graphql/generated';
import { CreatePage } from './pages/create';
import { DataStoresPage } from './pages/datastores';
import { DetailPage } from './pages/detail';
import type { Row } from './live-list';
import { ListPage } from './pages/list';
import { SignInPage } from './pages/signin';
import { TenantsPage } from './pages/tenants';
import { href, navigate, useRoute, type Route } from './router';
import { currentToken, signIn, signOut } from './session';
import { isPlatformAdmin, tenantOf, ViewerContext, type Viewer } from './viewer';

/** A page that only says something. */
function Message({ title, text }: { title: string; text: string }) {
  return (
    <div class="page">
      <h1>{title}</h1>
      <p>{text}</p>
    </div>
  );
}

/** The page a route shows to this viewer. */
function Page({ route, viewer, notice, setNotice, created, setCreated }: {
  route: Route; viewer: Viewer; notice: string | null; setNotice: (n: string) => void; created: Row | null; setCreated: (row: Row | null) => void;
}) {
  const admin = isPlatformAdmin(viewer);
  const home: Route = admin ? { page: 'datastores' } : { page: 'list', tenant: null };
  const shown = route.page === 'home' ? home : route;
  switch (shown.page) {
    case 'list':
    case 'create': {
      const tenant = tenantOf(viewer, shown.tenant);
      if (!tenant) return <Message title="Pick a tenant" text="Platform admins open a tenant's control planes from the Tenants page." />;
      if (shown.page === 'list') return <ListPage key={tenant} tenant={tenant} notice={notice} created={created} />;
      const onCreated = (row: Row) => {
        setCreated(row);
        setNotice(`Created ${row.name}; it appears below and updates live.`);
        navigate({ page: 'list', tenant: viewer.tenant ? null : tenant });
      };
      return <CreatePage tenant={tenant} onCreated={onCreated} />;
    }
    case 'detail': {
      const deleted = (name: string, tenant: string) => {
        setNotice(`Deleting ${name}.`);
        navigate({ page: 'list', tenant: viewer.tenant ? null : tenant });
      };
      return <DetailPage key={shown.id} id={shown.id} onDeleted={deleted} />;
    }
    case 'datastores':
      return admin ? <DataStoresPage /> : <Message title="Not allowed" text="Only platform admins see DataStores." />;
    case 'tenants':
      return admin ? <TenantsPage /> : <Message title="Not allowed" text="Only platform admins see tenants." />;
    default:
      return <Message title="Page not found" text="There is no such page in the portal." />;
  }
}

/** Loads who the token belongs to; a refused token signs out with the reason. */
function useSession() {
  const [token, setToken] = useState(currentToken());
  const [viewer, setViewer] = useState<Viewer | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const end = (reason: ApiError | null) => {
    signOut();
    closeLive();
    setViewer(null);
    setToken(null);
    setError(reason);
  };
  useEffect(() => setUnauthorizedHandler(() => end(new ApiError('Signed out', 'The server no longer accepts this token.'))), []);
  // A layout effect starts the request in the render's task, a frame earlier than an effect would.
  useLayoutEffect(() => {
    if (!token) return;
    request(ViewerDocument, {}).then((d) => setViewer(d.viewer), (e) => end(asApiError(e)));
  }, [token]);
  const start = (t: string) => {
    signIn(t);
    setError(null);
    setToken(t);
  };
  return { token, viewer, error, start, end };
}

/** The portal: sign-in, then the routed pages inside the layout. */
export function App() {
  const session = useSession();
  const route = useRoute();
  const [notice, setNotice] = useState<string | null>(null);
  const [created, setCreated] = useState<Row | null>(null);
  const first = useRef(true);
  useEffect(() => {
    if (first.current) first.current = false;
    else document.getElementById('main')?.focus();
    if (route.page !== 'list') {
      setNotice(null);
      setCreated(null);
    }
  }, [href(route)]);
  if (!session.token) return <SignInPage error={session.error} onSignIn={session.start} />;
  if (!session.viewer) return <main id="main"><Loading what="your session" /></main>;
  return (
    <ViewerContext.Provider value={session.viewer}>
      <Layout viewer={session.viewer} route={route} onSignOut={() => session.end(null)}>
        <Page route={route} viewer={session.viewer} notice={notice} setNotice={setNotice} created={created} setCreated={setCreated} />
      </Layout>
    </ViewerContext.Provider>
  );
}
