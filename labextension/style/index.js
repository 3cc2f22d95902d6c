import './statusbar.css';
import './panel.css';
import './costwidget.css';
import './chart.css';
import './jobs.css';
import './alerts.css';
import './hibernate.css';
