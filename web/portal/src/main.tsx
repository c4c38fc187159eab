import { render } from 'preact';
import { App } from './app';
import { adoptTokenFromHash } from './session';
import './styles.css';

adoptTokenFromHash();
render(<App />, document.getElementById('app')!);
