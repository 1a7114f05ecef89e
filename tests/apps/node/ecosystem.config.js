// A pm2 ecosystem file as its users write one, for the Express app and a queue worker
// beside it: `pm2 start ecosystem.config.js` runs it, and `scalpel serve --from-pm2
// ecosystem.config.js` prints the equivalent serve.toml (tests: crates/cli/tests/cli/pm2_cli.rs).
// APP_PORT lets a test pick the port; an ecosystem file is JavaScript, so it may read env.
module.exports = {
  apps: [
    {
      name: 'web',
      script: './express.js',
      instances: 2,
      exec_mode: 'cluster',
      env: { PORT: Number(process.env.APP_PORT || 3000), NODE_ENV: 'production' },
      env_staging: { NODE_ENV: 'staging' },
      max_memory_restart: '300M',
      kill_timeout: 3000,
      watch: false,
      merge_logs: true,
    },
    {
      name: 'jobs',
      script: 'queue.js',
      args: '--verbose',
      instances: 1,
      cron_restart: '0 * * * *',
      max_restarts: 5,
    },
  ],
};
