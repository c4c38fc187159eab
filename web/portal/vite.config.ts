// Builds the portal into the server's embedded assets, served at /portal/ (see README).
import { defineConfig } from 'vite';

/** Where `make run` (or TENANTPLANE_URL) serves the API during `npm run dev`. */
const api = process.env.TENANTPLANE_URL ?? 'http://127.0.0.1:8080';

export default defineConfig({
  base: '/portal/',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: '../../crates/api/assets/portal',
    emptyOutDir: true,
    target: 'es2022',
    modulePreload: { polyfill: false },
    cssCodeSplit: false,
    sourcemap: false,
    reportCompressedSize: true,
  },
  server: {
    proxy: {
      '/api': { target: api },
      '/graphql': { target: api, ws: true },
    },
  },
});
