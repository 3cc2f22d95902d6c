import './statusbar.css';
import './panel.css';
import './costwidget.css';
import './jobs.css';
