/**
 * Unit tests for the pure parts of the frontend (formatting) and the
 * status widget's DOM (under jsdom, per-file `@jest-environment jsdom`).
 */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src'],
  testRegex: 'src/.*/.*\\.spec\\.ts$',
  setupFiles: ['<rootDir>/jest.setup.js'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  }
};
